// trainbench-cli as a user (and a crash) meets it: exit codes, messages,
// signals, kill -9, resume, and that bad input never damages a database.
// About 2.5 minutes on 2 cores (over the suite's usual 120 s): each case is
// a real trainbench-cli process, and the signal, kill and resume cases must
// train long enough to be interrupted mid-step.
#include <QtTest>

#include <set>
#include <QElapsedTimer>
#include <QRegularExpression>
#include <QScopeGuard>

#include <cmath>

#include <csignal>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "TestPaths.h"
#include "TestPrinters.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

using namespace tb;

namespace {

struct Result {
    int exitCode = -1;
    QString out, err;
};

QByteArray fileBytes(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init();
    void versionAndHelp();
    void frontRunsLibTorchFreeCommandsWithoutLibTorch();
    void tinyRunFinishesListsAndExports();
    void badInputExitsTwoWithOneMessage_data();
    void badInputExitsTwoWithOneMessage();
    void readOnlyDatabaseIsRejectedUntouched();
    void sigintCancelsWithCheckpointThenResumeFinishes();
    void killDashNineLeavesAnInterruptedResumableRun();
    void devicesJsonSchema();
    void sampleExportAndInitFromARun();
    void failedResumeKeepsTheMetrics();
    void lockedDatabaseIsNotBadInput();
    void historyCommandsTagNoteFilterCompareDelete();
    void preflightExplainAndForcedTrain();
    void estimateResolvesAutoOnTheTarget();
    void tuneChoosesAMeasuredConfigThatFits();
    void sweepKilledHalfwayResumesEachTrialOnce();
    void detachedSweepAnswersOnceItsRunnerHoldsTheLock();

private:
    Result cli(const QStringList& args, int timeoutMs = 120000, const QString& program = TB_CLI_PATH);
    QString writeConfig(const QString& name, const QByteArray& json);
    // Starts `train` on the slow config and returns once it has printed progress.
    void startSlowRun(QProcess& p);
    QString m_db;
    std::unique_ptr<QTemporaryDir> m_dir;
};

void TestCli::init()
{
    m_dir = std::make_unique<QTemporaryDir>();
    QVERIFY(m_dir->isValid());
    m_db = m_dir->filePath("exp.db");
}

Result TestCli::cli(const QStringList& args, int timeoutMs, const QString& program)
{
    QProcess p;
    p.start(program, args);
    Result r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        r.err = "timed out";
        return r;
    }
    r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString TestCli::writeConfig(const QString& name, const QByteArray& json)
{
    const QString path = m_dir->filePath(name);
    QFile f(path);
    f.open(QIODevice::WriteOnly);
    f.write(json);
    return path;
}

static const QByteArray kTiny = R"({"name": "tiny", "device": "cpu",
  "model": {"n_layer": 1, "d_model": 32, "n_head": 2},
  "data": {"source": "text", "seq_len": 16},
  "train": {"batch_size": 4, "steps": 5, "eval_every": 5, "threads": 1}})";

// About 0.1 s a step on the development machine, so signals land mid-run.
static const QByteArray kSlow = R"({"name": "slow", "device": "cpu",
  "model": {"n_layer": 2, "d_model": 128, "n_head": 4},
  "data": {"source": "text", "seq_len": 64},
  "train": {"batch_size": 32, "steps": 80, "eval_every": 40, "checkpoint_every": 5, "threads": 1}})";

void TestCli::startSlowRun(QProcess& p)
{
    p.start(TB_CLI_PATH, {"train", "--config", writeConfig("slow.json", kSlow), "--db", m_db});
    QVERIFY(p.waitForStarted());
    QByteArray output;
    QTRY_VERIFY_WITH_TIMEOUT((output += p.readAllStandardOutput()).contains("step 1/"), 60000);
}

void TestCli::versionAndHelp()
{
    auto r = cli({"--version"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.startsWith("trainbench-cli "));
    r = cli({"train", "--help"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("--config FILE"));
    r = cli({"--help"});
    QCOMPARE(r.exitCode, 0);
    // Every command's name stands apart from its summary, the longest included.
    QVERIFY2(QRegularExpression("\\n  export-model +Write").match(r.out).hasMatch(), qPrintable(r.out));
    const auto lines = r.out.split('\n');
    const auto firstCommand = lines.indexOf("commands:") + 1;
    QVERIFY(firstCommand > 0);
    qsizetype column = -1;
    for (auto i = firstCommand; i < lines.size() && lines[i].startsWith("  "); ++i) {
        const auto summary = QRegularExpression("^  \\S+ +").match(lines[i]).capturedLength();
        QVERIFY2(summary > 0, qPrintable(lines[i]));
        if (column < 0) column = summary;
        QVERIFY2(summary == column, qPrintable("summaries are not in one column: " + lines[i]));
    }
    r = cli({});
    QCOMPARE(r.exitCode, 2);
}

// trainbench-cli is a front without LibTorch that hands the commands needing
// it to trainbench-cli-torch (app/CMakeLists.txt): the front must not link
// LibTorch (or every command pays 0.7 s to load it), must run its own commands
// itself, and must say so when the other program is missing.
void TestCli::frontRunsLibTorchFreeCommandsWithoutLibTorch()
{
    QProcess readelf;
    readelf.start("readelf", {"-d", TB_CLI_PATH});
    QVERIFY(readelf.waitForFinished(30000));
    const QString needed = QString::fromUtf8(readelf.readAllStandardOutput());
    QVERIFY2(needed.contains("(NEEDED)"), qPrintable(needed));
    QVERIFY2(!needed.contains("libtorch") && !needed.contains("libc10"), qPrintable(needed));

    // A copy of the front alone: its own commands run, a LibTorch command is
    // one message naming the program it needs and where it looked.
    const QString alone = m_dir->filePath("bin/trainbench-cli");
    QVERIFY(QDir().mkpath(m_dir->filePath("bin")));
    QVERIFY(QFile::copy(TB_CLI_PATH, alone));
    auto r = cli({"validate", "--config", writeConfig("tiny.json", R"({"name": "t"})")}, 30000, alone);
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains(": valid."), qPrintable(r.out + r.err));
    r = cli({"train", "--config", "x.json"}, 30000, alone);
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.startsWith("trainbench-cli: failed: 'train' is run by trainbench-cli-torch, which is not at ") &&
                 r.err.contains("reinstall Trainbench") && r.err.count('\n') == 1,
             qPrintable(r.err));
    // The built one hands it on: the same process, so the exit code and output are trainbench-cli-torch's.
    r = cli({"train", "--config", m_dir->filePath("missing.json")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("config file not found"), qPrintable(r.err));
}

void TestCli::tinyRunFinishesListsAndExports()
{
    const auto config = writeConfig("tiny.json", kTiny);
    auto r = cli({"train", "--config", config, "--db", m_db});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    QVERIFY(r.out.contains("run 1 finished: 5/5 steps"));
    QVERIFY(r.out.contains("stored in " + m_db));

    r = cli({"runs", "--db", m_db, "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto runs = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QCOMPARE(runs.size(), 1);
    QCOMPARE(runs[0]["status"].toString(), QString("finished"));
    QCOMPARE(runs[0]["steps_done"].toInt(), 5);
    QVERIFY(runs[0]["final_loss"].isDouble());
    // The planner's estimate at launch beside the measured peak.
    QVERIFY(runs[0]["estimated_peak_bytes"].toDouble() > 0);
    QVERIFY(runs[0]["measured_peak_bytes"].toDouble() > 0);
    QVERIFY2(std::abs(runs[0]["estimate_error"].toDouble()) < 0.02, qPrintable(QString::number(runs[0]["estimate_error"].toDouble())));

    r = cli({"export", "1", "--db", m_db});
    QCOMPARE(r.exitCode, 0);
    const auto lines = r.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.first(), QString("run,step,key,value,wall_time"));
    QCOMPARE(lines.filter(QRegularExpression("^1,\\d+,loss,")).size(), 5);
    QCOMPARE(lines.filter(QRegularExpression("^1,\\d+,val_loss,")).size(), 2); // step 0 and step 5

    r = cli({"export", "1", "--db", m_db, "--format", "json"});
    QCOMPARE(r.exitCode, 0);
    const auto points = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QVERIFY(!points.isEmpty());
    QVERIFY(points[0].toObject().contains("wall_time"));
}

void TestCli::badInputExitsTwoWithOneMessage_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    // Placeholders: @DB = an existing good database, @DIR = the temp folder.
    QTest::newRow("malformed json") << QStringList{"train", "--config", "@DIR/malformed.json", "--db", "@DB"}
                                    << "not valid JSON at line 2";
    QTest::newRow("missing data file") << QStringList{"train", "--config", "@DIR/nodata.json", "--db", "@DB"}
                                       << "data.path: file not found";
    QTest::newRow("missing config") << QStringList{"train", "--config", "@DIR/none.json", "--db", "@DB"}
                                    << "config file not found";
    QTest::newRow("not sqlite") << QStringList{"train", "--config", "@DIR/tiny.json", "--db", "@DIR/notes.db"}
                                << "is not a Trainbench experiment database";
    QTest::newRow("unwritable location") << QStringList{"train", "--config", "@DIR/tiny.json", "--db", "/proc/tb/exp.db"}
                                         << "choose another location with --db";
    QTest::newRow("not a device") << QStringList{"train", "--config", "@DIR/tiny.json", "--db", "@DB", "--device", "tpu"}
                                  << "device: must be \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"";
    QTest::newRow("bad steps") << QStringList{"train", "--config", "@DIR/tiny.json", "--db", "@DB", "--steps", "ten"}
                               << "--steps must be an integer";
    QTest::newRow("unknown option") << QStringList{"train", "--config", "@DIR/tiny.json", "--bd", "@DB"}
                                    << "unknown option --bd";
    QTest::newRow("resume unknown run") << QStringList{"resume", "42", "--db", "@DB"} << "run 42 does not exist";
    QTest::newRow("resume finished run") << QStringList{"resume", "1", "--db", "@DB"} << "already finished";
    QTest::newRow("export bad id") << QStringList{"export", "x", "--db", "@DB"} << "RUN_ID must be a positive integer";
    QTest::newRow("runs missing db") << QStringList{"runs", "--db", "@DIR/none.db"} << "no experiment database at";
    // No command writes over the database, its WAL or its checkpoints.
    QTest::newRow("export over the database") << QStringList{"export", "1", "--db", "@DB", "--output", "@DB"}
                                              << "would overwrite the experiment database";
    QTest::newRow("export over the WAL") << QStringList{"export", "1", "--db", "@DB", "--output", "@DB-wal"}
                                         << "would overwrite the experiment database";
    QTest::newRow("export-model into checkpoints")
        << QStringList{"export-model", "1", "--db", "@DB", "--output", "@DB-runs/1"} << "checkpoint folder";
    // Arguments that used to be ignored or misread.
    QTest::newRow("empty --db") << QStringList{"runs", "--db", ""} << "--db of 'runs' needs a non-empty value";
    QTest::newRow("extra argument") << QStringList{"export", "1", "2", "--db", "@DB"} << "unexpected argument \"2\"";
    QTest::newRow("argument to runs") << QStringList{"runs", "everything", "--db", "@DB"}
                                      << "unexpected argument \"everything\"";
    QTest::newRow("name not UTF-8") << QStringList{"train", "--config", "@DIR/tiny.json", "--db", "@DB", "--name", "@BADNAME"}
                                    << "name: is not valid UTF-8";
    QTest::newRow("nested 60000 deep") << QStringList{"train", "--config", "@DIR/deep.json", "--db", "@DB"}
                                       << "nested deeper than 32 levels";
    // Reading commands never write a schema into an empty file.
    QTest::newRow("tune without a budget") << QStringList{"tune", "--config", "@DIR/tiny.json"}
                                           << "needs a memory budget: give --budget BYTES";
    QTest::newRow("tune with a card and a budget")
        << QStringList{"tune", "--config", "@DIR/tiny.json", "--gpu", "T4", "--budget", "1000000"}
        << "takes --gpu NAME or --budget BYTES, not both";
    QTest::newRow("tune with a bad budget") << QStringList{"tune", "--config", "@DIR/tiny.json", "--budget", "lots"}
                                            << "--budget must be a positive size in bytes";
    QTest::newRow("tune measuring a catalogue card")
        << QStringList{"tune", "--config", "@DIR/tiny.json", "--gpu", "T4", "--measure-steps", "3"}
        << "--measure-steps measures on this machine, but --gpu plans for a catalogue card";
    QTest::newRow("sweep without a sweep file") << QStringList{"sweep", "--config", "@DIR/tiny.json", "--db", "@DB"}
                                               << "needs --config FILE and --sweep FILE";
    QTest::newRow("sweep resume with a config")
        << QStringList{"sweep", "--resume", "1", "--config", "@DIR/tiny.json", "--db", "@DB"} << "leave out --config and --sweep";
    QTest::newRow("sweep resume unknown") << QStringList{"sweep", "--resume", "9", "--db", "@DB"} << "sweep 9 does not exist";
    QTest::newRow("sweep file not json") << QStringList{"sweep", "--config", "@DIR/tiny.json", "--sweep", "@DIR/malformed.json", "--db", "@DB"}
                                         << "not valid JSON";
    QTest::newRow("runs on an empty file") << QStringList{"runs", "--db", "@DIR/empty.db"} << "no Trainbench runs yet";
}

void TestCli::badInputExitsTwoWithOneMessage()
{
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    writeConfig("tiny.json", kTiny);
    writeConfig("malformed.json", "{\n  \"train\": {\"steps\": 10,,}\n}");
    writeConfig("nodata.json", R"({"data": {"source": "text", "path": "corpus-that-is-gone.txt"}})");
    writeConfig("notes.db", "my notes, not a database\n");
    writeConfig("empty.db", "");
    writeConfig("deep.json", "{\"optim\": {\"betas\": " + QByteArray(60000, '[') + QByteArray(60000, ']') + "}}");
    // A good database with one finished run, to prove bad input never damages it.
    QCOMPARE(cli({"train", "--config", m_dir->filePath("tiny.json"), "--db", m_db, "--quiet"}).exitCode, 0);
    const auto before = fileBytes(m_db), notesBefore = fileBytes(m_dir->filePath("notes.db"));

    for (auto& a : args) a.replace("@DB", m_db).replace("@DIR", m_dir->path());
    Result r;
    if (args.last() == "@BADNAME") {
        // Bytes that are not UTF-8 cannot travel in a QString: a shell appends them.
        args.removeLast();
        r = cli(QStringList{"-c", "exec \"$0\" \"$@\" \"$(printf 'bad\\377name')\"", TB_CLI_PATH} + args, 60000, "sh");
    } else {
        r = cli(args);
    }
    QVERIFY2(r.exitCode == 2, qPrintable(QString("exit %1\n%2%3").arg(r.exitCode).arg(r.out, r.err)));
    QVERIFY2(r.err.startsWith("trainbench-cli: error: "), qPrintable(r.err));
    QCOMPARE(r.err.count("trainbench-cli: error: "), 1);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QVERIFY(!r.err.contains("terminate") && !r.err.contains("Aborted"));
    QCOMPARE(fileBytes(m_db), before);
    QCOMPARE(fileBytes(m_dir->filePath("notes.db")), notesBefore);
    QCOMPARE(fileBytes(m_dir->filePath("empty.db")), QByteArray());
}

void TestCli::readOnlyDatabaseIsRejectedUntouched()
{
    const auto config = writeConfig("tiny.json", kTiny);
    QCOMPARE(cli({"train", "--config", config, "--db", m_db, "--quiet"}).exitCode, 0);
    // Checkpoint the WAL into the main file so the read-only copy is self-contained.
    { Database db(m_db.toStdString(), Database::Mode::ReadWrite); db.exec("PRAGMA wal_checkpoint(TRUNCATE)"); }
    QFile::remove(m_db + "-wal");
    QFile::remove(m_db + "-shm");
    const auto before = fileBytes(m_db);
    QVERIFY(::chmod(m_db.toLocal8Bit().constData(), 0444) == 0);
    QVERIFY(::chmod(m_dir->path().toLocal8Bit().constData(), 0555) == 0);
    QVERIFY(::chmod(config.toLocal8Bit().constData(), 0444) == 0);
    Result r;
    if (::geteuid() == 0) {
        // root writes through permission bits: run the CLI as 'nobody' instead.
        r = cli({"--reuid=65534", "--regid=65534", "--clear-groups", TB_CLI_PATH, "train", "--config", config, "--db", m_db},
                120000, "setpriv");
    } else {
        r = cli({"train", "--config", config, "--db", m_db});
    }
    ::chmod(m_dir->path().toLocal8Bit().constData(), 0755);
    QVERIFY2(r.exitCode == 2, qPrintable(QString("exit %1: %2").arg(r.exitCode).arg(r.err)));
    QVERIFY2(r.err.contains("read-only") || r.err.contains("is its folder writable"), qPrintable(r.err));
    QCOMPARE(fileBytes(m_db), before);
    // Reading commands work on it, and change nothing.
    ::chmod(m_dir->path().toLocal8Bit().constData(), 0555);
    for (const QStringList& read : {QStringList{"runs", "--db", m_db}, QStringList{"export", "1", "--db", m_db}}) {
        r = ::geteuid() == 0 ? cli(QStringList{"--reuid=65534", "--regid=65534", "--clear-groups", TB_CLI_PATH} + read,
                                   60000, "setpriv")
                             : cli(read);
        QVERIFY2(r.exitCode == 0, qPrintable(read.join(' ') + ": " + r.err));
        QVERIFY2(r.out.contains("tiny") || r.out.contains("1,5,loss,"), qPrintable(r.out));
    }
    ::chmod(m_dir->path().toLocal8Bit().constData(), 0755);
    QCOMPARE(fileBytes(m_db), before);
}

void TestCli::failedResumeKeepsTheMetrics()
{
    // Run 1 stopped after step 6; its newest usable checkpoint (step 3) is damaged.
    auto config = kTiny;
    config.replace("\"steps\": 5", "\"steps\": 6, \"checkpoint_every\": 3");
    QCOMPARE(cli({"train", "--config", writeConfig("tiny.json", config), "--db", m_db, "--quiet"}).exitCode, 0);
    const auto laterMetrics = [&] {
        Database db(m_db.toStdString(), Database::Mode::ReadOnly);
        Statement s(db, "SELECT count(*) FROM metrics WHERE run_id=1 AND step>3");
        s.step();
        return s.columnInt(0);
    };
    {
        Database db(m_db.toStdString(), Database::Mode::ReadWrite);
        db.exec("UPDATE runs SET status='cancelled'; DELETE FROM artifacts WHERE step=6");
    }
    QFile damaged(m_db + "-runs/1/step-0000003.pt");
    QVERIFY(damaged.open(QIODevice::WriteOnly | QIODevice::Truncate));
    damaged.write("not a checkpoint");
    damaged.close();
    const auto before = laterMetrics();
    QVERIFY(before > 0);
    const auto r = cli({"resume", "1", "--db", m_db});
    QVERIFY2(r.exitCode != 0, qPrintable(r.out));
    QVERIFY2(r.err.contains("checkpoint"), qPrintable(r.err));
    // The resume never got under way, so nothing it would re-run was dropped.
    QCOMPARE(laterMetrics(), before);
}

void TestCli::sigintCancelsWithCheckpointThenResumeFinishes()
{
    QProcess p;
    startSlowRun(p);
    if (QTest::currentTestFailed()) return;
    // A few steps in, press Ctrl-C.
    QTest::qWait(1500);
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 130);

    RunStore store(m_db.toStdString());
    auto run = store.run(1);
    QCOMPARE(run->status, RunStatus::Cancelled);
    const int stoppedAt = run->stepsDone;
    QVERIFY(stoppedAt > 0 && stoppedAt < 80);
    const auto checkpoint = store.latestCheckpoint(1);
    QVERIFY(checkpoint.has_value());
    QCOMPARE(checkpoint->step, stoppedAt); // checkpoint written at the step where it stopped

    const auto r = cli({"resume", "1", "--db", m_db});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    run = store.run(1);
    QCOMPARE(run->status, RunStatus::Finished);
    QCOMPARE(run->stepsDone, 80);
    const auto losses = store.metrics(1, "loss");
    QCOMPARE(losses.size(), std::size_t(80));
    for (std::size_t i = 0; i < losses.size(); ++i) QCOMPARE(losses[i].step, int(i) + 1);
}

void TestCli::killDashNineLeavesAnInterruptedResumableRun()
{
    QProcess p;
    startSlowRun(p);
    if (QTest::currentTestFailed()) return;
    // Past the first checkpoint (step 5), however loaded the machine is: a
    // fixed wait failed when builds ran beside the test.
    QByteArray output;
    int lastStep = 0;
    QTRY_VERIFY_WITH_TIMEOUT(([&] {
                                 output += p.readAllStandardOutput();
                                 const QRegularExpression re("step (\\d+)/80");
                                 for (auto it = re.globalMatch(QString::fromUtf8(output)); it.hasNext();) {
                                     lastStep = std::max(lastStep, it.next().captured(1).toInt());
                                 }
                                 return lastStep >= 7;
                             }()),
                             120000);
    const double killedAt = wallClockNow();
    ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
    QVERIFY(p.waitForFinished(10000));

    {
        Database db(m_db.toStdString(), Database::Mode::ReadWrite);
        Statement check(db, "PRAGMA integrity_check");
        QVERIFY(check.step());
        QCOMPARE(check.columnText(0), std::string("ok"));
    }
    // `runs` only reads: it judges the dead owner itself (it showed "running"
    // until something opened the store read-write).
    const auto listed = cli({"runs", "--db", m_db, "--json"});
    QCOMPARE(listed.exitCode, 0);
    const auto rows = QJsonDocument::fromJson(listed.out.toUtf8()).array();
    QCOMPARE(rows.size(), 1);
    QCOMPARE(rows[0].toObject()["status"].toString(), QString("interrupted"));
    RunStore store(m_db.toStdString()); // opening it read-write writes that down
    const auto run = store.run(1);
    QCOMPARE(run->status, RunStatus::Interrupted);
    const auto losses = store.metrics(1, "loss");
    QVERIFY(!losses.empty());
    const double lag = killedAt - losses.back().wallTime;
    qInfo("last stored metric %.2f s before the kill (step %d)", lag, losses.back().step);
    QVERIFY2(lag <= 1.5, qPrintable(QString("metrics lag %1 s").arg(lag)));

    const auto r = cli({"resume", "1", "--db", m_db});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    QCOMPARE(store.run(1)->status, RunStatus::Finished);
    QCOMPARE(store.metrics(1, "loss").size(), std::size_t(80));
}

void TestCli::devicesJsonSchema()
{
    const auto check = [](const QJsonArray& list) {
        for (const auto& v : list) {
            const auto o = v.toObject();
            QVERIFY(o["name"].isString() && !o["name"].toString().isEmpty());
            QVERIFY(QRegularExpression("^\\d+\\.\\d+$").match(o["compute_capability"].toString()).hasMatch());
            QVERIFY(o["memory_bytes"].isDouble() && o["memory_bytes"].toDouble() > 0);
            QVERIFY(o["bf16"].isBool());
            QVERIFY(o["bf16_reason"].toString().startsWith("bf16: "));
        }
    };
    auto r = cli({"devices", "--catalog", "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto catalogue = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QVERIFY(catalogue.size() >= 25);
    check(catalogue);

    r = cli({"devices", "--json"}); // this machine: a list (empty without a GPU), reason on stderr
    QCOMPARE(r.exitCode, 0);
    QVERIFY(QJsonDocument::fromJson(r.out.toUtf8()).isArray());
    check(QJsonDocument::fromJson(r.out.toUtf8()).array());

    r = cli({"devices", "--gpu", "2xT4", "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto t4 = QJsonDocument::fromJson(r.out.toUtf8()).array();
    check(t4);
    QCOMPARE(t4[0]["count"].toInt(), 2);
    QCOMPARE(t4[0]["bf16"].toBool(), false);
    QCOMPARE(t4[0]["auto_precision"].toString(), QString("fp16"));

    r = cli({"devices", "--gpu", "A1OO"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.err.contains("closest:"));
}


void TestCli::sampleExportAndInitFromARun()
{
    // A tiny Llama on 2-digit addition: sample, export, then a run that starts from it.
    const auto config = writeConfig("llama.json", R"({"name": "llama", "device": "cpu",
      "model": {"type": "llama", "n_layer": 1, "d_model": 32, "n_head": 4, "n_kv_head": 2},
      "data": {"source": "addition", "digits": 2},
      "train": {"batch_size": 8, "steps": 3, "threads": 1}})");
    auto r = cli({"train", "--config", config, "--db", m_db, "--quiet"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));

    r = cli({"sample", "1", "--db", m_db, "--prompt", "12+34=", "--temperature", "0", "--json"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    const auto sample = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(sample["prompt"].toString(), QString("12+34="));
    QVERIFY(sample["completion"].isString());
    const auto ids = sample["completion_ids"].toArray();
    QVERIFY(!ids.isEmpty() && ids.size() <= 64);
    for (const auto id : ids) QVERIFY(id.toInt() >= 0 && id.toInt() < 13);
    // Greedy is deterministic; the plain form prints prompt and answer.
    r = cli({"sample", "1", "--db", m_db, "--prompt", "12+34=", "--temperature", "0"});
    QCOMPARE(r.out.trimmed(), "12+34=" + sample["completion"].toString());
    // chat answers each line the same way; the sum is written whole (its
    // digits are generated least significant first: the first alone read "6").
    {
        QProcess chat;
        chat.start(TB_CLI_PATH, {"chat", "1", "--db", m_db, "--temperature", "0", "--max-tokens", "64"});
        QVERIFY(chat.waitForStarted());
        chat.write("12+34=\n12+34=\n");
        chat.closeWriteChannel();
        QVERIFY(chat.waitForFinished(60000));
        const QString out = QString::fromUtf8(chat.readAllStandardOutput());
        QVERIFY2(chat.exitCode() == 0, qPrintable(chat.readAllStandardError()));
        QCOMPARE(out, sample["completion"].toString() + "\n" + sample["completion"].toString() + "\n");
    }

    for (const QStringList& bad : {QStringList{"sample", "1", "--db", m_db, "--prompt", "hello"},
                                   QStringList{"sample", "1", "--db", m_db},
                                   QStringList{"sample", "1", "--db", m_db, "--prompt", "1+2", "--temperature", "-1"},
                                   QStringList{"sample", "9", "--db", m_db, "--prompt", "1+2"},
                                   QStringList{"export-model", "1", "--db", m_db}}) {
        r = cli(bad);
        QVERIFY2(r.exitCode == 2, qPrintable(bad.join(' ') + ": " + r.out + r.err));
        QCOMPARE(r.err.count('\n'), 1); // one clear message
    }

    const QString out = m_dir->filePath("exported");
    r = cli({"export-model", "1", "--db", m_db, "--output", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    QVERIFY(QFile::exists(out + "/model.safetensors"));
    QVERIFY(QFile::exists(out + "/config.json"));

    // init_from: the exported folder, and the run by id; both recorded in the run's events.
    for (const QString& from : {out, QString("run:1")}) {
        QByteArray json = R"({"name": "tuned", "device": "cpu",
          "model": {"type": "llama", "n_layer": 1, "d_model": 32, "n_head": 4, "n_kv_head": 2},
          "data": {"source": "addition", "digits": 3}, "lora": {"rank": 2},
          "train": {"batch_size": 8, "steps": 2, "threads": 1, "init_from": "FROM"}})";
        json.replace("FROM", from.toUtf8());
        r = cli({"train", "--config", writeConfig("tuned.json", json), "--db", m_db, "--quiet"});
        QVERIFY2(r.exitCode == 0, qPrintable(from + ": " + r.out + r.err));
    }
    RunStore store(m_db.toStdString());
    int recorded = 0;
    for (std::int64_t id : {2, 3}) {
        for (const auto& e : store.events(id)) recorded += e.kind == "init_from";
    }
    QCOMPARE(recorded, 2);

    // A mismatching base fails the run with the tensor and both shapes named.
    r = cli({"train", "--config", writeConfig("wide.json", R"({"device": "cpu",
      "model": {"type": "llama", "n_layer": 1, "d_model": 64, "n_head": 4},
      "data": {"source": "addition", "digits": 2},
      "train": {"steps": 1, "init_from": "run:1"}})"), "--db", m_db, "--quiet"});
    QVERIFY(r.exitCode != 0);
    QVERIFY2((r.out + r.err).contains("model.embed_tokens.weight has shape [13, 32]"), qPrintable(r.out + r.err));
}

void TestCli::lockedDatabaseIsNotBadInput()
{
    const auto config = writeConfig("tiny.json", kTiny);
    QCOMPARE(cli({"train", "--config", config, "--db", m_db, "--quiet"}).exitCode, 0);
    Database holder(m_db.toStdString(), Database::Mode::ReadWrite);
    holder.exec("BEGIN IMMEDIATE"); // another process's write lock, held throughout
    const auto r = cli({"train", "--config", config, "--db", m_db});
    holder.exec("ROLLBACK");
    QVERIFY2(r.exitCode == 1, qPrintable(QString("exit %1: %2").arg(r.exitCode).arg(r.err)));
    QVERIFY2(r.err.contains("holds its write lock"), qPrintable(r.err));
}

void TestCli::historyCommandsTagNoteFilterCompareDelete()
{
    std::int64_t a, b;
    {
        RunStore store(m_db.toStdString());
        a = store.createRun({"small", R"({"name":"small","train":{"batch_size":8},"optim":{"lr":0.001}})", "cpu", "fp32", "0", "1.13", 10});
        b = store.createRun({"large", R"({"name":"large","train":{"batch_size":64},"optim":{"lr":0.001}})", "cpu", "fp32", "0", "1.13", 10});
        store.markEnded(a, RunStatus::Finished, {10, 2.5, std::nullopt, std::nullopt, ""});
        store.markEnded(b, RunStatus::Failed, {3, 4.0, std::nullopt, std::nullopt, "diverged"});
    }
    const QString ida = QString::number(a), idb = QString::number(b);
    // The table's names were cut at 24 bytes (and so inside a UTF-8 character);
    // the column is as wide as the longest name.
    {
        RunStore store(m_db.toStdString());
        const auto c = store.createRun({"llama-3.2-1b lora r16 on alpaca — 3 epochs", R"({"name":"x"})", "cpu", "fp32", "0", "1.13", 10});
        store.markEnded(c, RunStatus::Finished, {10, 1.5, std::nullopt, std::nullopt, ""});
        const auto table = cli({"runs", "--db", m_db}).out.split('\n');
        QVERIFY2(table.size() > 3 && table.join('\n').contains("llama-3.2-1b lora r16 on alpaca — 3 epochs finished"),
                 qPrintable(table.join('\n')));
        // Every row's status starts in the header's STATUS column.
        const int column = table[0].indexOf("STATUS");
        for (int row = 1; row <= 3; ++row) QVERIFY2(table[row].mid(column).startsWith("finished") || table[row].mid(column).startsWith("failed"), qPrintable(table[row]));
        QCOMPARE(cli({"delete", QString::number(c), "--yes", "--db", m_db}).exitCode, 0);
    }
    auto r = cli({"tag", ida, "baseline", "--db", m_db});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("baseline"));
    QCOMPARE(cli({"note", idb, "lr too high; try 3e-4", "--db", m_db}).exitCode, 0);
    QCOMPARE(cli({"tag", ida, "two words", "--db", m_db}).exitCode, 2);
    QCOMPARE(cli({"tag", "99", "x", "--db", m_db}).exitCode, 2);

    r = cli({"runs", "--db", m_db, "--json", "--filter", "tag:baseline"});
    QCOMPARE(r.exitCode, 0);
    auto list = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QCOMPARE(list.size(), 1);
    QCOMPARE(list[0].toObject()["name"].toString(), QString("small"));
    QCOMPARE(list[0].toObject()["tags"].toArray().first().toString(), QString("baseline"));
    r = cli({"runs", "--db", m_db, "--json", "--filter", "train.batch_size>=16 status=failed"});
    list = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QCOMPARE(list.size(), 1);
    QCOMPARE(list[0].toObject()["note"].toString(), QString("lr too high; try 3e-4"));
    r = cli({"runs", "--db", m_db, "--filter", "colour=red"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("unknown field \"colour\""), qPrintable(r.err));

    r = cli({"compare", ida, idb, "--db", m_db, "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto diff = QJsonDocument::fromJson(r.out.toUtf8()).object();
    const auto fields = diff["differing_fields"].toArray();
    QCOMPARE(fields.size(), 1); // only the batch size differs (names are not config)
    QCOMPARE(fields[0].toObject()["path"].toString(), QString("train.batch_size"));
    QCOMPARE(fields[0].toObject()["values"].toArray()[1].toInt(), 64);
    QCOMPARE(diff["runs"].toArray()[1].toObject()["status"].toString(), QString("failed"));
    QCOMPARE(cli({"compare", ida, "--db", m_db}).exitCode, 2);

    // Delete asks; without a terminal it needs --yes, and nothing goes before.
    r = cli({"delete", idb, "--db", m_db});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--yes"), qPrintable(r.err));
    QCOMPARE(cli({"runs", "--db", m_db, "--json"}).out.count("\"id\""), 2);
    QCOMPARE(cli({"delete", idb, "--db", m_db, "--yes"}).exitCode, 0);
    r = cli({"runs", "--db", m_db, "--json"});
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).array().size(), 1);
}


// `estimate --config` plans what the config becomes on the named GPU, as the
// form, the planner and preflight do: "auto" is fp16 on a T4 and bf16 on an
// A100, and a precision the card lacks is said, not planned as if it ran.
void TestCli::estimateResolvesAutoOnTheTarget()
{
    const QString config = writeConfig("auto.json", QByteArray(kTiny).replace("\"device\": \"cpu\"", "\"device\": \"auto\""));
    const auto peak = [&](const QStringList& extra) {
        const auto r = cli(QStringList{"estimate", "--config", config, "--json"} + extra);
        const auto json = QJsonDocument::fromJson(r.out.toUtf8()).object();
        return std::make_pair(json["peak_bytes"].toDouble(), json["gpu"].toObject()["precision"].toString());
    };
    for (const auto& [gpu, precision] : {std::pair{"T4", "fp16"}, std::pair{"A100", "bf16"}}) {
        const auto [bytes, planned] = peak({"--gpu", gpu});
        QCOMPARE(planned, QString(precision));
        QCOMPARE(bytes, peak({"--gpu", gpu, "--precision", precision}).first);
    }
    // One verdict: the tiny model's memory fits a T4, but bf16 does not run
    // there, and that is the answer (it printed "fits" and then "does NOT run").
    auto r = cli({"estimate", "--config", config, "--gpu", "T4", "--precision", "bf16"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("does not run: bf16 needs compute capability 8.0") && r.out.contains("7.5"), qPrintable(r.out));
    QVERIFY2(!r.out.contains("fits"), qPrintable(r.out));
    r = cli({"estimate", "--config", config, "--gpu", "T4", "--precision", "bf16", "--json"});
    const auto gpu = QJsonDocument::fromJson(r.out.toUtf8()).object()["gpu"].toObject();
    QCOMPARE(gpu["verdict"].toString(), QString("does_not_run"));
    QVERIFY(gpu["precision_error"].toString().contains("7.5"));
    r = cli({"estimate", "--config", config, "--gpu", "T4", "--json"});
    QCOMPARE(QJsonDocument::fromJson(r.out.toUtf8()).object()["gpu"].toObject()["verdict"].toString(), QString("fits"));
    // Mixed precision asked for on a config kept on the CPU too (fp16 is
    // CUDA's: traced as a GPU runs it), with or without a card (once refused).
    const QString onCpu = writeConfig("on-cpu.json", kTiny);
    for (const QStringList& extra : {QStringList{"--gpu", "T4", "--precision", "fp16"}, QStringList{"--precision", "fp16"},
                                     QStringList{"--precision", "bf16"}}) {
        r = cli(QStringList{"estimate", "--config", onCpu, "--json"} + extra);
        QVERIFY2(r.exitCode == 0, qPrintable(extra.join(' ') + ": " + r.err));
        QVERIFY2(QJsonDocument::fromJson(r.out.toUtf8()).object().contains("derived_step"), qPrintable(extra.join(' ')));
    }
}

void TestCli::tuneChoosesAMeasuredConfigThatFits()
{
    const QString config = writeConfig("tune.json", kTiny);
    const qint64 budget = 16 << 20;
    const QString output = m_dir->filePath("tuned.json");
    auto r = cli({"tune", "--config", config, "--budget", "16 MiB", "--measure-steps", "2", "--measure-top", "2",
                  "--max-batch", "64", "--output", output, "--json"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    const auto json = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(json["budget_bytes"].toDouble(), double(budget));
    const auto candidates = json["candidates"].toArray();
    const int winner = json["winner"].toInt();
    QVERIFY(winner >= 0 && winner < candidates.size());
    int measured = 0;
    for (const auto& value : candidates) {
        const auto c = value.toObject();
        // Nothing over the budget is proposed; everything over it says why.
        if (c["planned_peak_bytes"].toDouble() > budget) QVERIFY2(c["rejected"].toString().startsWith("does not fit"), qPrintable(r.out));
        if (c.contains("measured_tokens_per_second")) ++measured;
    }
    QCOMPARE(measured, 2);
    const auto w = candidates[winner].toObject();
    QVERIFY(w["measured_tokens_per_second"].toDouble() > 0);
    QVERIFY(w["measured_peak_bytes"].toDouble() <= budget);
    QVERIFY(!w.contains("rejected"));
    // The winner as a config file that trains as it is.
    const auto tuned = QJsonDocument::fromJson(fileBytes(output)).object();
    QCOMPARE(tuned["train"].toObject()["batch_size"].toInt(), w["batch_size"].toInt());
    QCOMPARE(tuned["train"].toObject()["precision"].toString(), w["precision"].toString());
    QCOMPARE(cli({"validate", "--config", output}).exitCode, 0);

    // A catalogue card is planned, not measured: bf16 does not run on a T4.
    r = cli({"tune", "--config", config, "--gpu", "T4", "--all"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    QVERIFY2(r.out.contains("does not run: needs compute capability 8.0 or newer, this GPU has 7.5"), qPrintable(r.out));
    QVERIFY2(r.out.contains("winner: ") && r.out.contains("fastest predicted, not measured"), qPrintable(r.out));

    // Nothing fits: exit 1, and the smallest changes that would.
    r = cli({"tune", "--config", config, "--budget", "64 KiB", "--measure-steps", "0"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.out.contains("nothing fits 64.00 KiB") && r.out.contains("a larger card: "), qPrintable(r.out));
}

// A sweep of 4 trainable trials (and 4 that do not fit the budget) killed
// with SIGKILL while its third trial trains, then resumed: every trial ends
// with exactly one run, the skipped ones say why, a second runner is
// refused while one runs, and early termination stops the two learning
// rates a constant schedule makes hopeless, never the best trial.
void TestCli::sweepKilledHalfwayResumesEachTrialOnce()
{
    // The data file beside the config, named relatively: each trial's config
    // is written in the sweep's folder and must still find it.
    QByteArray corpus;
    for (int i = 0; corpus.size() < 40000; ++i) {
        corpus += "the quick brown fox " + QByteArray::number(i % 97) + " jumps over the lazy dog and runs home.\n";
    }
    writeConfig("sweep-corpus.txt", corpus);
    const QString config = writeConfig("sweep-base.json", R"({"name": "tiny", "device": "cpu",
      "model": {"n_layer": 1, "d_model": 64, "n_head": 2}, "data": {"source": "text", "path": "sweep-corpus.txt", "seq_len": 16},
      "optim": {"schedule": "constant", "warmup_steps": 0},
      "train": {"batch_size": 4, "steps": 600, "eval_every": 50, "threads": 1}})");
    const QString sweepFile = writeConfig("lr.json", R"({"name": "lr grid", "method": "grid",
      "metric": {"name": "val_loss", "goal": "minimize"},
      "parameters": {"optim.lr": {"values": [0.003, 0.001, 0.00001, 0.000001]}, "train.batch_size": {"values": [4, 4096]}},
      "early_terminate": {"type": "median", "min_step": 50}})");
    QProcess first;
    first.start(TB_CLI_PATH, {"sweep", "--config", config, "--sweep", sweepFile, "--budget", "8 MiB", "--db", m_db});
    QByteArray out;
    QElapsedTimer timer;
    timer.start();
    while (!out.contains("trial 3/8 (optim.lr=0.001 train.batch_size=4): run") && timer.elapsed() < 60000) {
        first.waitForReadyRead(200);
        out += first.readAllStandardOutput();
    }
    QVERIFY2(out.contains("trial 2/8 (optim.lr=0.003 train.batch_size=4096): skipped, does not fit"), out.constData());
    // One runner at a time.
    auto r = cli({"sweep", "--resume", "1", "--db", m_db});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("sweep 1 is being run by another trainbench-cli process"), qPrintable(r.err));
    first.kill(); // SIGKILL: no chance to tidy up; trial 3 trains on
    first.waitForFinished();

    r = cli({"sweep", "--resume", "1", "--db", m_db, "--json"}, 180000);
    QVERIFY2(r.exitCode == 0, qPrintable(r.out + r.err));
    const auto json = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(json["status"].toString(), QString("finished"));
    const auto trials = json["trials"].toArray();
    QCOMPARE(trials.size(), 8);
    std::set<qint64> runs;
    for (const auto& value : trials) {
        const auto t = value.toObject();
        if (t["values"].toObject()["train.batch_size"].toInt() == 4096) {
            QCOMPARE(t["status"].toString(), QString("skipped"));
            QVERIFY2(t["reason"].toString().startsWith("does not fit: planned "), qPrintable(t["reason"].toString()));
            QVERIFY(!t.contains("run_id"));
            continue;
        }
        QVERIFY(t.contains("run_id"));
        runs.insert(t["run_id"].toInteger());
    }
    QCOMPARE(runs.size(), std::size_t{4});
    // Exactly one run per trial in the store, none left over.
    const auto list = cli({"runs", "--db", m_db, "--json"});
    QCOMPARE(QJsonDocument::fromJson(list.out.toUtf8()).array().size(), 4);
    // Early termination: the two hopeless rates stopped, the best finished.
    QCOMPARE(trials[4].toObject()["status"].toString(), QString("stopped"));
    QCOMPARE(trials[6].toObject()["status"].toString(), QString("stopped"));
    QVERIFY(trials[4].toObject()["reason"].toString().contains("was worse than the median"));
    const int best = json["best_trial"].toInt();
    QVERIFY(best == 1 || best == 3);
    QCOMPARE(trials[best - 1].toObject()["status"].toString(), QString("finished"));
}

void TestCli::preflightExplainAndForcedTrain()
{
    // preflight: exit 3 on an error for the named GPU, 0 when clean; JSON as documented.
    const QString bf16 = writeConfig("bf16.json", QByteArray(kTiny).replace("\"threads\": 1", "\"threads\": 1, \"precision\": \"bf16\""));
    auto r = cli({"preflight", "--config", bf16, "--gpu", "T4"});
    QCOMPARE(r.exitCode, 3);
    QVERIFY2(r.out.contains("bf16_unsupported") && r.out.contains("train.precision = \"auto\""), qPrintable(r.out));
    r = cli({"preflight", "--config", bf16, "--gpu", "A100", "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto json = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QVERIFY2(json["findings"].isArray(), qPrintable(r.out));
    r = cli({"preflight", "--config", m_dir->filePath("nope.json")});
    QCOMPARE(r.exitCode, 2);
    r = cli({"preflight", "--config", bf16, "--gpu", "Voodoo5"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.err.contains("Voodoo5"));

    // explain: a file, a missing file, standard input; the primary finding first.
    const QString log = writeConfig("fail.log", "step 3 loss 2.2\r\n\x1b[31mRuntimeError: CUDA error: device-side assert triggered\x1b[0m\n");
    r = cli({"explain", log, "--json"});
    QCOMPARE(r.exitCode, 0);
    const auto explained = QJsonDocument::fromJson(r.out.toUtf8()).object()["findings"].toArray();
    QCOMPARE(explained.first().toObject()["kind"].toString(), QString("device_side_assert"));
    QCOMPARE(cli({"explain", m_dir->filePath("absent.log")}).exitCode, 2);
    QCOMPARE(cli({"explain"}).exitCode, 2);

    // A device this machine lacks is a preflight error: exit 3 with the finding, nothing stored.
    writeConfig("tiny.json", kTiny);
    r = cli({"train", "--config", m_dir->filePath("tiny.json"), "--db", m_db, "--device", "cuda:7"});
    QCOMPARE(r.exitCode, 3);
    QVERIFY2(r.err.contains("cuda_unavailable") && r.err.contains("\"cuda:7\""), qPrintable(r.err));
    QVERIFY(!QFile::exists(m_db));

    // train: blocked by a preflight error (exit 3, nothing stored), then forced
    // (stored with the override; its failure explained and kept).
    QTemporaryDir model;
    {
        QFile f(model.filePath("config.json"));
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(R"({"n_positions": 8})");
    }
    const QString tooLong = writeConfig("long.json", QByteArray(kTiny).replace("\"threads\": 1", "\"threads\": 1, \"init_from\": \"" + model.path().toUtf8() + "\""));
    r = cli({"train", "--config", tooLong, "--db", m_db});
    QCOMPARE(r.exitCode, 3);
    QVERIFY2(r.err.contains("sequence_too_long") && r.err.contains("--force"), qPrintable(r.err));
    r = cli({"train", "--config", tooLong, "--db", m_db, "--force"});
    QCOMPARE(r.exitCode, 1);
    RunStore store(m_db.toStdString());
    const auto runs = store.listRuns();
    QCOMPARE(runs.size(), std::size_t(1));
    const auto sets = store.findings(runs.front().id);
    QCOMPARE(sets.size(), std::size_t(2));
    QVERIFY(sets[0].overridden);
    QCOMPARE(sets[1].source, std::string("failure"));
}

// `sweep --detach` answers once its runner holds the sweep's lock, so the
// window's Sweeps dialog, which reads the lock right after the answer, sees
// the sweep running and keeps watching it (it used to answer at once; on a
// busy machine the dialog looked before the runner had started, stopped
// watching, and never showed the sweep finished). A runner that cannot run
// says why in the answer, not only in its log.
void TestCli::detachedSweepAnswersOnceItsRunnerHoldsTheLock()
{
    const QString config = writeConfig("detach.json", R"({"name": "tiny", "device": "cpu",
      "model": {"n_layer": 1, "d_model": 32, "n_head": 2}, "data": {"source": "text", "seq_len": 16},
      "optim": {"schedule": "constant", "warmup_steps": 0},
      "train": {"batch_size": 4, "steps": 100000, "eval_every": 100, "threads": 1}})");
    const QString sweepFile = writeConfig("detach-sweep.json", R"({"method": "grid", "metric": {"name": "val_loss"},
      "parameters": {"optim.lr": {"values": [0.003, 0.001]}}})");
    auto r = cli({"sweep", "--config", config, "--sweep", sweepFile, "--db", m_db, "--detach"});
    QVERIFY2(r.exitCode == 0 && r.out.contains("sweep 1 started in the background"), qPrintable(r.out + r.err));
    const QString lock = m_db + "-runs/sweep-1/lock";
    const auto lockFree = [&lock] {
        const int f = ::open(QFile::encodeName(lock).constData(), O_RDONLY | O_CLOEXEC);
        const bool free = f >= 0 && flock(f, LOCK_EX | LOCK_NB) == 0;
        if (f >= 0) ::close(f);
        return free;
    };
    // The runner (its own session: it outlives the command and this test)
    // is stopped however the test ends: Ctrl-C's signal, its trial
    // checkpoints and stops, then the runner, whose lock goes with it.
    const auto answered = QRegularExpression("pid ([0-9]+)").match(r.out);
    QVERIFY2(answered.hasMatch(), qPrintable(r.out));
    const pid_t runner = static_cast<pid_t>(answered.captured(1).toLongLong());
    const auto stop = qScopeGuard([&] {
        ::kill(runner, SIGINT);
        QElapsedTimer waited;
        waited.start();
        while (!lockFree() && waited.elapsed() < 60000) QTest::qWait(100);
    });
    // Held now by that runner (the sweep is not over: its trials train for 100,000 steps).
    const int fd = ::open(QFile::encodeName(lock).constData(), O_RDONLY | O_CLOEXEC);
    QVERIFY2(fd >= 0, "no lock file when the answer came");
    const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    ::close(fd);
    QVERIFY2(held, "the runner did not hold the sweep's lock when the answer came");
    const QByteArray holder = fileBytes(lock);
    QCOMPARE(static_cast<pid_t>(holder.split(' ').first().toLongLong()), runner);

    // A second runner is refused in the answer itself.
    r = cli({"sweep", "--resume", "1", "--db", m_db, "--detach"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("sweep 1 is being run by another trainbench-cli process"), qPrintable(r.err));

    ::kill(runner, SIGINT);
    QTRY_VERIFY_WITH_TIMEOUT(lockFree(), 60000);
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
