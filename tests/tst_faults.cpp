// The standing fault suite: many trainbench-cli processes on one database at
// once, and kill -9 at random points (start-up on a new database, mid-step,
// mid-checkpoint). Afterwards the database must pass integrity_check, every
// run must end in a terminal state (or be resumable and then finish), no
// (run, key, step) may be stored twice, and no checkpoint may sit in another
// run's folder.
#include <QtTest>

#include <csignal>
#include <random>

#include "TestPaths.h"
#include "TestPrinters.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

using namespace tb;

namespace {

const QByteArray kTiny = R"({"name": "fault", "device": "cpu",
  "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
  "data": {"source": "text", "seq_len": 16},
  "train": {"batch_size": 4, "steps": 4, "eval_every": 4, "checkpoint_every": 2, "threads": 1}})";

// About 0.1 s a step with a checkpoint after every one: kills land mid-checkpoint often.
const QByteArray kSlow = R"({"name": "slow", "device": "cpu",
  "model": {"n_layer": 2, "d_model": 128, "n_head": 4},
  "data": {"source": "text", "seq_len": 64},
  "train": {"batch_size": 32, "steps": 40, "eval_every": 20, "checkpoint_every": 1, "threads": 1}})";

std::int64_t scalar(Database& db, const char* sql)
{
    Statement s(db, sql);
    s.step();
    return s.columnInt(0);
}

} // namespace

class TestFaults : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
        m_db = m_dir->filePath("exp.db");
    }
    void eightProcessesTwentyRounds();
    void killNineAtRandomPoints();

private:
    QString writeConfig(const QString& name, const QByteArray& json)
    {
        QFile f(m_dir->filePath(name));
        f.open(QIODevice::WriteOnly);
        f.write(json);
        return f.fileName();
    }
    void checkInvariants(bool allTerminal);
    std::unique_ptr<QTemporaryDir> m_dir;
    QString m_db;
};

void TestFaults::checkInvariants(bool allTerminal)
{
    Database db(m_db.toStdString(), Database::Mode::ReadOnly);
    {
        Statement check(db, "PRAGMA integrity_check");
        QVERIFY(check.step());
        QCOMPARE(check.columnText(0), std::string("ok"));
    }
    QCOMPARE(scalar(db, "SELECT count(*) FROM (SELECT 1 FROM metrics GROUP BY run_id, key, step HAVING count(*) > 1)"),
             std::int64_t(0));
    if (allTerminal) {
        QCOMPARE(scalar(db, "SELECT count(*) FROM runs WHERE status NOT IN ('finished', 'cancelled', 'failed')"),
                 std::int64_t(0));
    }
    RunStore store(m_db.toStdString(), RunStore::Mode::ReadOnly);
    for (const auto& run : store.listRuns()) {
        for (const auto& a : store.artifacts(run.id)) {
            QVERIFY2(QString::fromStdString(a.path).startsWith(QString::fromStdString(store.runFolder(run.id)) + "/"),
                     a.path.c_str());
        }
    }
}

void TestFaults::eightProcessesTwentyRounds()
{
    const QString config = writeConfig("tiny.json", kTiny);
    std::int64_t previous = 0;
    for (int round = 1; round <= 20; ++round) {
        // A run of the last round, rewound to its step-2 checkpoint and left
        // "interrupted": two processes race to resume it while six train.
        if (previous > 0) {
            Database db(m_db.toStdString(), Database::Mode::ReadWrite);
            Statement rewind(db, "UPDATE runs SET status='interrupted' WHERE id=?");
            rewind.bind(1, previous);
            rewind.run();
            Statement drop(db, "DELETE FROM artifacts WHERE run_id=? AND step=4");
            drop.bind(1, previous);
            drop.run();
        }
        std::vector<std::unique_ptr<QProcess>> procs;
        std::vector<bool> isResume;
        for (int i = 0; i < 8; ++i) {
            auto p = std::make_unique<QProcess>();
            const bool resume = previous > 0 && i < 2;
            if (resume) p->start(TB_CLI_PATH, {"resume", QString::number(previous), "--db", m_db});
            else p->start(TB_CLI_PATH, {"train", "--config", config, "--db", m_db, "--quiet"});
            procs.push_back(std::move(p));
            isResume.push_back(resume);
        }
        int resumed = 0;
        for (std::size_t i = 0; i < procs.size(); ++i) {
            auto& p = *procs[i];
            QVERIFY2(p.waitForFinished(120000), "a process hung");
            const QString err = QString::fromUtf8(p.readAllStandardError());
            QCOMPARE(p.exitStatus(), QProcess::NormalExit);
            if (isResume[i]) {
                // One wins; the other is told the run is running or finished.
                QVERIFY2(p.exitCode() == 0 || (p.exitCode() == 2 && (err.contains("already running")
                                                                     || err.contains("already finished"))),
                         qPrintable(QString("round %1: exit %2: %3").arg(round).arg(p.exitCode()).arg(err)));
                resumed += p.exitCode() == 0;
            } else {
                QVERIFY2(p.exitCode() == 0, qPrintable(QString("round %1: exit %2: %3").arg(round).arg(p.exitCode()).arg(err)));
            }
        }
        if (previous > 0) QCOMPARE(resumed, 1);
        previous = RunStore(m_db.toStdString(), RunStore::Mode::ReadOnly).listRuns().back().id;
    }
    checkInvariants(true);
    QCOMPARE(RunStore(m_db.toStdString(), RunStore::Mode::ReadOnly).listRuns().size(), std::size_t(8 + 19 * 6));
}

void TestFaults::killNineAtRandomPoints()
{
    const QString config = writeConfig("slow.json", kSlow);
    std::mt19937 random(20261122);
    for (int trial = 0; trial < 8; ++trial) {
        // Even trials start on a new database and are killed anywhere from
        // start-up (before or while it creates the schema) to the first
        // steps; odd ones continue it and are killed mid-run, often
        // mid-checkpoint (one after every step).
        if (trial % 2 == 0) {
            for (const char* suffix : {"", "-wal", "-shm"}) QFile::remove(m_db + suffix);
        }
        const int delayMs = trial % 2 == 0 ? std::uniform_int_distribution<int>(100, 1200)(random)
                                           : std::uniform_int_distribution<int>(1000, 4000)(random);
        QProcess p;
        p.start(TB_CLI_PATH, {"train", "--config", config, "--db", m_db, "--quiet"});
        QVERIFY(p.waitForStarted());
        QTest::qSleep(delayMs);
        ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
        p.waitForFinished();
        qInfo("trial %d: killed after %d ms", trial, delayMs);
        // The next open finds a consistent database and the run interrupted;
        // a resume (or a fresh run, if the kill came before the first
        // checkpoint) finishes.
        RunStore store(m_db.toStdString());
        const auto runs = store.listRuns();
        if (runs.empty()) {
            qInfo("  no run yet: killed before the run was created");
            continue;
        }
        const auto run = runs.back();
        const auto checkpoint = store.latestCheckpoint(run.id);
        qInfo("  run %lld found %s, latest checkpoint at step %d", static_cast<long long>(run.id),
              runStatusName(run.status).c_str(), checkpoint ? checkpoint->step : 0);
        QVERIFY2(run.status == RunStatus::Interrupted || run.status == RunStatus::Finished,
                 runStatusName(run.status).c_str());
        if (run.status == RunStatus::Interrupted && checkpoint) {
            QProcess resume;
            resume.start(TB_CLI_PATH, {"resume", QString::number(run.id), "--db", m_db, "--quiet"});
            QVERIFY(resume.waitForFinished(120000));
            QVERIFY2(resume.exitCode() == 0, resume.readAllStandardError().constData());
        }
        checkInvariants(false);
    }
}

QTEST_GUILESS_MAIN(TestFaults)
#include "tst_faults.moc"
