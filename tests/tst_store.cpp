// The experiment store: what must survive concurrent use, crashes and bad files.
#include <QtTest>

#include <atomic>
#include <clocale>
#include <cmath>
#include <fstream>
#include <mutex>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "common/Files.h"
#include "common/Percent.h"
#include "store/MetricWriter.h"
#include "TestPrinters.h"
#include "store/RunBundle.h"
#include "store/RunLiveness.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

using namespace tb;

namespace {

std::string fileBytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

NewRun sampleRun(const std::string& name = "r")
{
    return {name, R"({"name":"r"})", "cpu", "fp32", "0.1.0", "1.13", 100};
}

} // namespace

class TestStore : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void init()
    {
        m_dir = std::make_unique<QTemporaryDir>();
        QVERIFY(m_dir->isValid());
    }
    void roundTrip();
    void estimateErrorsNeverShowMinusZero();
    void schemaVersionAndWal();
    void latestMetricPerKey();
    void truncateAfterResumePoint();
    void readerWhileWriterWrites();
    void metricWriterBatchesAndFlushes();
    void deadOwnerBecomesInterrupted();
    void liveOwnerStaysRunning();
    void procFileReadErrorIsNoText();
    void readOnlyViewShowsADeadOwnersRunAsInterrupted();
    void notSqliteFileIsRejectedUntouched();
    void foreignSqliteFileIsRejectedUntouched();
    void newerSchemaIsRejected();
    void unwritableFolderIsOneClearError();
    void defaultPathFollowsEnvironment();
    // Reliability fixes: each of these failed on the code before them.
    void twoDatabasesInOneFolderKeepTheirOwnCheckpoints();
    void legacyCheckpointFolderMigratesWithoutLosingAFile();
    void secondClaimOfARunIsRefused();
    void ownerInAnotherPidNamespaceIsJudgedByHeartbeat();
    void concurrentFirstOpensCreateTheSchemaOnce();
    void retriedMetricNeverDuplicatesARow();
    void metricBatchOutlastsALockedDatabase();
    void readOnlyOpenNeverWritesASchema();
    // History.
    void filterByStatusTagConfigFieldAndText();
    void filterRefusesWhatItCannotRead();
    void filterNumbersIgnoreTheLocale();
    void injectionStringsAreOnlyData();
    void tagsNotesRenameAndDelete();
    void longSeriesKeepsFirstLastAndSpikes();
    void olderSchemaIsReadWithoutMigrating();
    // Runs copied between stores.
    void copiedRunKeepsItsOriginAndIsUpdatedInPlace();

private:
    std::string dbPath(const char* name = "exp.db") const { return m_dir->filePath(name).toStdString(); }
    std::unique_ptr<QTemporaryDir> m_dir;
};

void TestStore::roundTrip()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun("first"));
    store.markRunning(id, 100, "cpu", "fp32");
    store.appendMetrics({{id, 1, "loss", 2.5, 10.0}, {id, 2, "loss", 2.0, 11.0}, {id, 2, "lr", 0.001, 11.0}});
    store.addEvent({id, 12.0, "info", "checkpoint", "saved"});
    store.addArtifact({id, "checkpoint", 2, dbPath("ckpt.pt"), 123, 12.0});
    store.markEnded(id, RunStatus::Finished, {2, 2.0, 2.1, std::nullopt, "done"});

    RunStore reopened(dbPath());
    const auto run = reopened.run(id);
    QVERIFY(run.has_value());
    QCOMPARE(run->name, std::string("first"));
    QCOMPARE(run->status, RunStatus::Finished);
    QCOMPARE(run->stepsDone, 2);
    QCOMPARE(*run->finalLoss, 2.0);
    QCOMPARE(*run->finalValLoss, 2.1);
    QVERIFY(!run->finalValAccuracy.has_value());
    QCOMPARE(run->configJson, std::string(R"({"name":"r"})"));
    QCOMPARE(reopened.metrics(id, "loss").size(), std::size_t(2));
    QCOMPARE(reopened.metrics(id).size(), std::size_t(3));
    QCOMPARE(reopened.events(id).size(), std::size_t(1));
    QCOMPARE(reopened.artifacts(id).at(0).bytes, std::int64_t(123));
    QCOMPARE(reopened.listRuns().size(), std::size_t(1));
}

void TestStore::schemaVersionAndWal()
{
    { RunStore store(dbPath()); }
    Database db(dbPath(), Database::Mode::ReadOnly);
    Statement version(db, "PRAGMA user_version");
    QVERIFY(version.step());
    QCOMPARE(int(version.columnInt(0)), RunStore::schemaVersion());
    Statement mode(db, "PRAGMA journal_mode");
    QVERIFY(mode.step());
    QCOMPARE(mode.columnText(0), std::string("wal"));
}

void TestStore::latestMetricPerKey()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    store.appendMetrics({{id, 1, "loss", 3.0, 1}, {id, 2, "loss", 2.0, 2}});
    store.appendMetrics({{id, 3, "loss", 1.5, 3}, {id, 3, "val_loss", 1.7, 3}});
    const auto latest = store.latestMetrics(id);
    QCOMPARE(latest.at("loss").step, 3);
    QCOMPARE(latest.at("loss").value, 1.5);
    QCOMPARE(latest.at("val_loss").value, 1.7);
}

void TestStore::truncateAfterResumePoint()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    std::vector<MetricPoint> points;
    for (int s = 1; s <= 10; ++s) points.push_back({id, s, "loss", 10.0 - s, double(s)});
    store.appendMetrics(points);
    store.truncateMetricsAfter(id, 6);
    QCOMPARE(store.metrics(id, "loss").size(), std::size_t(6));
    QCOMPARE(store.latestMetrics(id).at("loss").step, 6);
}

void TestStore::readerWhileWriterWrites()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun());
    }
    std::atomic<bool> done{false};
    std::atomic<int> reads{0};
    std::string readerError;
    std::thread reader([&] {
        try {
            RunStore store(dbPath(), RunStore::Mode::ReadOnly);
            std::size_t last = 0;
            while (!done.load()) {
                const auto n = store.metrics(id, "loss").size();
                if (n < last) throw std::runtime_error("metrics went backwards");
                last = n;
                ++reads;
            }
        } catch (const std::exception& e) {
            readerError = e.what();
        }
    });
    {
        MetricWriter writer(dbPath(), id, std::chrono::milliseconds(5));
        for (int s = 1; s <= 2000; ++s) {
            writer.addMetric(s, "loss", 1.0 / s);
            if (s % 200 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        writer.flush();
        QVERIFY(writer.error().empty());
    }
    done = true;
    reader.join();
    QVERIFY2(readerError.empty(), readerError.c_str());
    QVERIFY(reads.load() > 0);
    RunStore store(dbPath());
    QCOMPARE(store.metrics(id, "loss").size(), std::size_t(2000));
}

void TestStore::metricWriterBatchesAndFlushes()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    MetricWriter writer(dbPath(), id, std::chrono::milliseconds(10000));
    writer.addMetric(1, "loss", 1.0);
    writer.addEvent("info", "test", "hello");
    writer.setStepsDone(1);
    writer.flush();
    QCOMPARE(store.metrics(id).size(), std::size_t(1));
    QCOMPARE(store.events(id).size(), std::size_t(1));
    QCOMPARE(store.run(id)->stepsDone, 1);
    QVERIFY(store.run(id)->heartbeatAt.has_value());
}

void TestStore::deadOwnerBecomesInterrupted()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun());
        store.markRunning(id, 100, "cpu", "fp32");
        store.appendMetrics({{id, 1, "loss", 2.5, 1}, {id, 2, "loss", 2.25, 2}});
    }
    // Pretend the owner was a process that no longer exists.
    {
        Database db(dbPath(), Database::Mode::ReadWrite);
        Statement s(db, "UPDATE runs SET owner_pid=?, owner_start='1' WHERE id=?");
        s.bind(1, std::int64_t(999999999)).bind(2, id);
        s.run();
    }
    RunStore store(dbPath());
    const auto run = store.run(id);
    QCOMPARE(run->status, RunStatus::Interrupted);
    QVERIFY(QString::fromStdString(run->message).contains("trainbench-cli resume"));
    QCOMPARE(store.events(id).back().kind, std::string("interrupted"));
    // It never recorded a final loss; its last stored one is shown (History and
    // `runs` showed none, though the metrics were there).
    QVERIFY(run->finalLoss.has_value());
    QCOMPARE(*run->finalLoss, 2.25);
    QCOMPARE(*store.listRuns().front().finalLoss, 2.25);
    QCOMPARE(store.listRuns("loss<2.3").size(), std::size_t(1)); // and the filter reads the same loss
}

// A reader that may not write (trainbench-cli runs, export, compare, follow)
// judges the owner's liveness itself: the run reads as interrupted, and the
// file keeps saying "running" until a writer opens it.
void TestStore::readOnlyViewShowsADeadOwnersRunAsInterrupted()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun());
        store.markRunning(id, 100, "cpu", "fp32");
        Statement s(store.database(), "UPDATE runs SET owner_pid=?, owner_start='1' WHERE id=?");
        s.bind(1, std::int64_t(999999999)).bind(2, id);
        s.run();
    }
    {
        RunStore reader(dbPath(), RunStore::Mode::ReadOnly);
        const auto run = reader.run(id);
        QCOMPARE(run->status, RunStatus::Interrupted);
        QVERIFY2(QString::fromStdString(run->message).contains("trainbench-cli resume"), run->message.c_str());
        QCOMPARE(reader.listRuns().front().status, RunStatus::Interrupted);
        // Filters see the same status.
        QCOMPARE(reader.listRuns("status=running").size(), std::size_t(0));
        QCOMPARE(reader.listRuns("status=interrupted").size(), std::size_t(1));
        QCOMPARE(reader.listRuns("status!=running").size(), std::size_t(1));
    }
    Database db(dbPath(), Database::Mode::ReadOnly);
    Statement s(db, "SELECT status FROM runs WHERE id=?");
    s.bind(1, id);
    QVERIFY(s.step());
    QCOMPARE(s.columnText(0), std::string("running")); // nothing was written
}

void TestStore::liveOwnerStaysRunning()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    store.markRunning(id, 100, "cpu", "fp32"); // this process, alive
    RunStore other(dbPath());
    QCOMPARE(other.run(id)->status, RunStatus::Running);
}

void TestStore::notSqliteFileIsRejectedUntouched()
{
    const auto path = dbPath("notes.db");
    { std::ofstream(path) << "these are my notes, not a database\n"; }
    const auto before = fileBytes(path);
    try {
        RunStore store(path);
        QFAIL("opened");
    } catch (const StoreError& e) {
        QVERIFY2(QString(e.what()).contains("is not a Trainbench experiment database"), e.what());
    }
    QCOMPARE(fileBytes(path), before);
}

void TestStore::foreignSqliteFileIsRejectedUntouched()
{
    const auto path = dbPath("other.db");
    {
        Database db(path, Database::Mode::ReadWrite);
        db.exec("CREATE TABLE contacts(name TEXT); INSERT INTO contacts VALUES('ada');");
    }
    const auto before = fileBytes(path);
    QVERIFY_EXCEPTION_THROWN(RunStore store(path), StoreError);
    QCOMPARE(fileBytes(path), before);
}

void TestStore::newerSchemaIsRejected()
{
    { RunStore store(dbPath()); }
    {
        Database db(dbPath(), Database::Mode::ReadWrite);
        db.exec("PRAGMA user_version=999");
    }
    try {
        RunStore store(dbPath());
        QFAIL("opened");
    } catch (const StoreError& e) {
        QVERIFY(QString(e.what()).contains("newer Trainbench"));
    }
}

void TestStore::unwritableFolderIsOneClearError()
{
    try {
        RunStore store("/proc/trainbench-test/exp.db");
        QFAIL("opened");
    } catch (const StoreError& e) {
        QVERIFY2(QString(e.what()).contains("choose another location with --db"), e.what());
    }
}

void TestStore::defaultPathFollowsEnvironment()
{
    qputenv("TRAINBENCH_DB", "/tmp/x/explicit.db");
    QCOMPARE(RunStore::defaultPath(), std::string("/tmp/x/explicit.db"));
    qunsetenv("TRAINBENCH_DB");
    qputenv("XDG_DATA_HOME", "/tmp/xdg");
    QCOMPARE(RunStore::defaultPath(), std::string("/tmp/xdg/trainbench/experiments.db"));
    qunsetenv("XDG_DATA_HOME");
    QVERIFY(QString::fromStdString(RunStore::defaultPath()).endsWith("/.local/share/trainbench/experiments.db"));
}

void TestStore::twoDatabasesInOneFolderKeepTheirOwnCheckpoints()
{
    RunStore a(dbPath("a.db")), b(dbPath("b.db"));
    const auto idA = a.createRun(sampleRun()), idB = b.createRun(sampleRun());
    QCOMPARE(idA, idB); // both are run 1
    QVERIFY(a.runFolder(idA) != b.runFolder(idB));
    QVERIFY(QString::fromStdString(a.runFolder(idA)).endsWith("/a.db-runs/1"));
}

void TestStore::legacyCheckpointFolderMigratesWithoutLosingAFile()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun());
    }
    // Turn it back into a schema-1 database with a checkpoint in the old
    // shared <folder>/runs/<id>, and a duplicated metric row.
    const std::string legacy = m_dir->filePath("runs/1/step-0000005.pt").toStdString();
    QVERIFY(QDir(m_dir->path()).mkpath("runs/1"));
    std::ofstream(legacy, std::ios::binary) << "weights of run 1";
    {
        Database db(dbPath(), Database::Mode::ReadWrite);
        db.exec("DROP TABLE metrics; CREATE TABLE metrics(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, "
                "step INTEGER NOT NULL, key TEXT NOT NULL, value REAL, wall_time REAL NOT NULL);"
                "CREATE INDEX metrics_by_run_key_step ON metrics(run_id, key, step);"
                "DROP INDEX runs_by_origin; ALTER TABLE runs DROP COLUMN origin_host; ALTER TABLE runs DROP COLUMN origin_store; "
                "ALTER TABLE runs DROP COLUMN origin_run_id; ALTER TABLE runs DROP COLUMN origin_label; "
                "ALTER TABLE runs DROP COLUMN owner_pidns; ALTER TABLE runs DROP COLUMN estimated_peak_bytes; "
                "ALTER TABLE runs DROP COLUMN estimate_json; ALTER TABLE runs DROP COLUMN measured_peak_bytes; "
                "ALTER TABLE runs DROP COLUMN note; DROP TABLE run_tags; DROP TABLE deleted_runs; DROP TABLE metric_blocks; DROP TABLE run_findings; "
                "DROP TABLE sweep_trials; DROP TABLE sweeps; "
                "PRAGMA user_version=1;");
        db.exec("INSERT INTO metrics VALUES(1, 3, 'loss', 2.0, 1), (1, 3, 'loss', 1.5, 2), "
                "(1, 2, 'mem_peak_bytes', 1500, 1), (1, 4, 'mem_peak_bytes', 1200, 1)");
        Statement s(db, "INSERT INTO artifacts(run_id, kind, step, path, bytes, created_at) VALUES(1, 'checkpoint', 5, ?, 16, 1)");
        s.bind(1, legacy);
        s.run();
    }
    RunStore store(dbPath());
    const auto checkpoint = store.latestCheckpoint(id);
    QVERIFY(checkpoint.has_value());
    QCOMPARE(checkpoint->path, store.runFolder(id) + "/step-0000005.pt");
    QCOMPARE(fileBytes(checkpoint->path), std::string("weights of run 1"));
    QCOMPARE(fileBytes(legacy), std::string("weights of run 1")); // still there for any other database
    const auto loss = store.metrics(id, "loss");
    QCOMPARE(loss.size(), std::size_t(1));
    QCOMPARE(loss[0].value, 1.5); // the last written of the duplicates
    // Schema 3 takes the measured peak from the stored metric; later batches keep the largest.
    QCOMPARE(store.run(id)->measuredPeakBytes, std::optional<std::int64_t>(1500));
    QVERIFY(!store.run(id)->estimatedPeakBytes.has_value());
    store.appendMetrics({{id, 6, "mem_peak_bytes", 900, 3}, {id, 7, "loss", 1.2, 3}});
    QCOMPARE(store.run(id)->measuredPeakBytes, std::optional<std::int64_t>(1500));
    store.appendMetrics({{id, 8, "mem_peak_bytes", 2048, 4}});
    QCOMPARE(store.run(id)->measuredPeakBytes, std::optional<std::int64_t>(2048));
    store.setEstimate(id, 2000, R"({"peak_bytes": 2000})");
    QCOMPARE(store.run(id)->estimatedPeakBytes, std::optional<std::int64_t>(2000));
    QCOMPARE(store.run(id)->estimateJson, std::string(R"({"peak_bytes": 2000})"));
}

void TestStore::secondClaimOfARunIsRefused()
{
    RunStore first(dbPath()), second(dbPath());
    const auto id = first.createRun(sampleRun());
    first.markEnded(id, RunStatus::Cancelled, {3, 1.0, std::nullopt, std::nullopt, "cancelled"});
    first.claimRun(id);
    try {
        second.claimRun(id);
        QFAIL("the second claim succeeded");
    } catch (const InputError& e) {
        QCOMPARE(QString(e.what()), QString("run %1 is already running (pid %2)").arg(id).arg(::getpid()));
    }
    QCOMPARE(second.run(id)->status, RunStatus::Running);
}

void TestStore::ownerInAnotherPidNamespaceIsJudgedByHeartbeat()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun());
        store.markRunning(id, 100, "cpu", "fp32");
    }
    // A pid that means nothing here, from another PID namespace, with a fresh
    // heartbeat: a live run in a container, not a dead one.
    const auto setOwner = [&](double heartbeatAge) {
        Database db(dbPath(), Database::Mode::ReadWrite);
        Statement s(db, "UPDATE runs SET owner_pid=999999999, owner_pidns='pid:[1]', heartbeat_at=? WHERE id=?");
        s.bind(1, wallClockNow() - heartbeatAge).bind(2, id);
        s.run();
    };
    setOwner(1.0);
    QCOMPARE(RunStore(dbPath()).run(id)->status, RunStatus::Running);
    setOwner(RunStore::kHeartbeatTimeoutSeconds + 10);
    RunStore store(dbPath());
    QCOMPARE(store.run(id)->status, RunStatus::Interrupted);
    QCOMPARE(store.events(id).size(), std::size_t(1));
}

void TestStore::concurrentFirstOpensCreateTheSchemaOnce()
{
    for (int round = 0; round < 20; ++round) {
        const auto path = dbPath(("race" + std::to_string(round) + ".db").c_str());
        std::vector<std::thread> threads;
        std::mutex mutex;
        std::vector<std::string> errors;
        for (int i = 0; i < 8; ++i) {
            threads.emplace_back([&] {
                try {
                    RunStore store(path);
                    store.createRun(sampleRun());
                } catch (const std::exception& e) {
                    std::lock_guard<std::mutex> lock(mutex);
                    errors.push_back(e.what());
                }
            });
        }
        for (auto& t : threads) t.join();
        QVERIFY2(errors.empty(), errors.empty() ? "" : errors.front().c_str());
        QCOMPARE(RunStore(path).listRuns().size(), std::size_t(8));
    }
}

void TestStore::retriedMetricNeverDuplicatesARow()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    store.appendMetrics({{id, 7, "loss", 2.0, 1}});
    store.appendMetrics({{id, 7, "loss", 2.0, 2}}); // the same batch, retried
    QCOMPARE(store.metrics(id).size(), std::size_t(1));
}

void TestStore::metricBatchOutlastsALockedDatabase()
{
    using namespace std::chrono_literals;
    RunStore store(dbPath());
    const auto kept = store.createRun(sampleRun("kept")), dropped = store.createRun(sampleRun("dropped"));
    // Another process holds the write lock for longer than SQLite's busy
    // timeout (5 s).
    Database locker(dbPath(), Database::Mode::ReadWrite);
    locker.exec("BEGIN IMMEDIATE");
    std::thread release([&] {
        std::this_thread::sleep_for(6500ms);
        locker.exec("COMMIT");
    });
    {
        MetricWriter patient(dbPath(), kept, 50ms);   // retries for up to a minute
        MetricWriter hasty(dbPath(), dropped, 50ms, 1ms); // gives up at its first failure
        for (int step = 1; step <= 3; ++step) {
            patient.addMetric(step, "loss", 1.0 / step);
            hasty.addMetric(step, "loss", 1.0 / step);
        }
        std::thread giveUp([&] { hasty.flush(); });
        patient.flush();
        giveUp.join();
        QVERIFY2(patient.error().empty(), patient.error().c_str());
        QCOMPARE(patient.lostValues(), std::int64_t(0));
        // What could not be stored is counted and said, never silently dropped.
        QVERIFY(hasty.lostValues() >= 3);
        QVERIFY2(QString::fromStdString(hasty.error()).contains("could not be stored"), hasty.error().c_str());
    }
    release.join();
    QCOMPARE(store.metrics(kept, "loss").size(), std::size_t(3));
}

void TestStore::readOnlyOpenNeverWritesASchema()
{
    const auto path = dbPath("empty.db");
    std::ofstream(path).close();
    try {
        RunStore store(path, RunStore::Mode::ReadOnly);
        QFAIL("an empty file opened as a database of runs");
    } catch (const StoreError& e) {
        QVERIFY2(QString(e.what()).contains("no Trainbench runs yet"), e.what());
    }
    QCOMPARE(fileBytes(path), std::string());
}

namespace {

NewRun configRun(const std::string& name, int batch, const std::string& type)
{
    return {name,
            R"({"name":")" + name + R"(","model":{"type":")" + type + R"("},"train":{"batch_size":)" + std::to_string(batch) + "}}",
            "cpu", "fp32", "0.1.0", "1.13", 100};
}

std::vector<std::int64_t> ids(const std::vector<RunRecord>& runs)
{
    std::vector<std::int64_t> out;
    for (const auto& r : runs) out.push_back(r.id);
    return out;
}

} // namespace

void TestStore::filterByStatusTagConfigFieldAndText()
{
    RunStore store(dbPath());
    const auto a = store.createRun(configRun("baseline small", 8, "gpt"));
    const auto b = store.createRun(configRun("wide llama", 32, "llama"));
    const auto c = store.createRun(configRun("wide gpt", 16, "gpt"));
    store.markEnded(a, RunStatus::Finished, {100, 2.0, std::nullopt, std::nullopt, ""});
    store.markEnded(b, RunStatus::Failed, {10, 4.0, std::nullopt, std::nullopt, "diverged"});
    store.markEnded(c, RunStatus::Finished, {100, 3.0, std::nullopt, std::nullopt, ""});
    store.addTag(a, "baseline");
    store.addTag(c, "baseline");
    store.setNote(b, "lr too high");
    using V = std::vector<std::int64_t>;
    QCOMPARE(ids(store.listRuns()), (V{a, b, c}));
    QCOMPARE(ids(store.listRuns("status=failed")), (V{b}));
    QCOMPARE(ids(store.listRuns("tag:baseline")), (V{a, c}));
    QCOMPARE(ids(store.listRuns("train.batch_size>=16")), (V{b, c}));
    QCOMPARE(ids(store.listRuns("train.batch_size>=16 tag:baseline")), (V{c}));
    QCOMPARE(ids(store.listRuns("model.type=gpt")), (V{a, c}));
    QCOMPARE(ids(store.listRuns("model.type!=gpt")), (V{b}));
    QCOMPARE(ids(store.listRuns("loss<2.5")), (V{a}));
    QCOMPARE(ids(store.listRuns("wide")), (V{b, c}));
    QCOMPARE(ids(store.listRuns("\"lr too\"")), (V{b})); // the note, quoted words
    QCOMPARE(ids(store.listRuns("100%")), V{});       // % is a character, not a wildcard
    QCOMPARE(store.run(a)->tags, (std::vector<std::string>{"baseline"}));
    // Review columns: best validation loss, latest tokens/s, the parent run.
    store.appendMetrics({{a, 10, "val_loss", 2.5, 1}, {a, 20, "val_loss", 2.1, 2}, {a, 30, "val_loss", 2.3, 3},
                         {a, 30, "tokens_per_s", 1234.0, 3}});
    QCOMPARE(store.run(a)->bestValLoss, std::optional<double>(2.1));
    QCOMPARE(store.run(a)->tokensPerSecond, std::optional<double>(1234.0));
    const auto child = store.createRun({"child", R"({"train":{"init_from":"run:)" + std::to_string(a) + R"("}})", "cpu",
                                        "fp32", "0", "1.13", 10});
    QCOMPARE(store.run(child)->parentRunId, std::optional<std::int64_t>(a));
    QVERIFY(!store.run(b)->parentRunId.has_value());
    // A stored config that is not JSON breaks neither the listing nor a filter.
    const auto broken = store.createRun({"broken", "{not json", "cpu", "fp32", "0", "1.13", 10});
    QCOMPARE(store.listRuns().size(), std::size_t(5));
    QCOMPARE(ids(store.listRuns("train.batch_size>=16")), (V{b, c}));
    QVERIFY(!store.run(broken)->parentRunId.has_value());

    // An empty value matches runs without one (note= : no note).
    QCOMPARE(ids(store.listRuns("note=")), (V{a, c, child, broken}));
    QCOMPARE(ids(store.listRuns("note!=")), (V{b}));
    // JSON booleans, and texts that look like numbers, compare as written.
    const auto flags = store.createRun({"flags", R"({"model":{"tie_embeddings":false},"train":{"activation_checkpointing":true,"init_from":"12"}})",
                                        "cpu", "fp32", "0", "1.13", 10});
    QCOMPARE(ids(store.listRuns("train.activation_checkpointing=true")), (V{flags}));
    QCOMPARE(ids(store.listRuns("model.tie_embeddings=false")), (V{flags}));
    QCOMPARE(ids(store.listRuns("train.init_from=12")), (V{flags}));
    QCOMPARE(ids(store.listRuns("train.batch_size=16")), (V{c}));
    QCOMPARE(ids(store.listRuns("train.batch_size!=16 train.batch_size>1")), (V{a, b}));
    // Operators inside double quotes are text.
    const auto angled = store.createRun(configRun("<baseline>", 4, "gpt"));
    QCOMPARE(ids(store.listRuns("name=\"<baseline>\"")), (V{angled}));
    // Numbers as people write them.
    QCOMPARE(ids(store.listRuns("loss<+2.5")), (V{a}));
    QCOMPARE(ids(store.listRuns("loss<2.5e0 loss>-1")), (V{a}));
}

// A filter's numbers read the same in any locale: the GUI's QApplication sets
// LC_NUMERIC from the environment, where strtod wanted "2,5".
void TestStore::filterNumbersIgnoreTheLocale()
{
    const char* previous = std::setlocale(LC_NUMERIC, nullptr);
    const std::string restore = previous ? previous : "C";
    bool comma = false;
    for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "de_DE", "fr_FR"}) {
        if (std::setlocale(LC_NUMERIC, name) && std::localeconv()->decimal_point[0] == ',') {
            comma = true;
            break;
        }
    }
    if (!comma) QSKIP("no locale with a decimal comma is installed here (locale -a)");
    RunStore store(dbPath());
    const auto a = store.createRun(sampleRun("a"));
    store.markEnded(a, RunStatus::Finished, {100, 2.0, std::nullopt, std::nullopt, ""});
    std::vector<std::int64_t> found;
    try {
        for (const auto& r : store.listRuns("loss<2.5")) found.push_back(r.id);
    } catch (const std::exception& e) {
        std::setlocale(LC_NUMERIC, restore.c_str());
        QFAIL(e.what());
    }
    std::setlocale(LC_NUMERIC, restore.c_str());
    QCOMPARE(found, std::vector<std::int64_t>{a});
}

void TestStore::filterRefusesWhatItCannotRead()
{
    RunStore store(dbPath());
    for (const char* bad : {"colour=red", "=3", "tag:", "\"open", "train..batch_size=1", "x.y'); DROP TABLE runs;--=1",
                            "loss<abc", "loss<<abc", "steps=ten", "train.batch_size>big", "status=runing",
                            "status<finished", "loss<", "name<", "steps=", "foo.bar=3", "optim.learning_rate=0.1"}) {
        try {
            store.listRuns(bad);
            QFAIL(qPrintable(QString("accepted: %1").arg(bad)));
        } catch (const InputError& e) {
            QVERIFY2(QString(e.what()).startsWith("filter: "), e.what());
        }
    }
    // The error names the word that is wrong, not only that one is.
    try {
        store.listRuns("tag:x loss<<abc foo.bar=3");
        QFAIL("accepted a malformed comparison");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("\"loss<<abc\""), e.what());
    }
    try {
        store.listRuns("optim.weight_decy=0.1");
        QFAIL("accepted an unknown config path");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("did you mean optim.weight_decay"), e.what());
    }
    try {
        store.listRuns("optim.learning_rate=0.1");
        QFAIL("accepted an unknown config path");
    } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains("optim has ") && QString(e.what()).contains(", lr,"), e.what());
    }
}

// Every user-supplied text (filter, tag, note, name) is a bound value: these
// strings are stored and matched as themselves, and the schema is untouched.
void TestStore::injectionStringsAreOnlyData()
{
    RunStore store(dbPath());
    const std::vector<std::string> attacks{"x'; DROP TABLE runs; --", "\" OR 1=1 --", "') OR ('1'='1",
                                           "%' OR name LIKE '%", "Robert'); DELETE FROM metrics;--"};
    const auto id = store.createRun(sampleRun());
    for (const auto& text : attacks) {
        store.rename(id, text);
        QCOMPARE(store.run(id)->name, text);
        store.setNote(id, text);
        QCOMPARE(store.run(id)->note, text);
        // As a filter: a result, or one clear refusal of a term it cannot read.
        for (const auto& filter : {text, "name=" + text, "\"" + text + "\""}) {
            try {
                QVERIFY(store.listRuns(filter).size() <= 1);
            } catch (const InputError& e) {
                QVERIFY2(QString(e.what()).startsWith("filter: "), e.what());
            }
        }
    }
    store.addTag(id, "a';DROP-TABLE--");
    QCOMPARE(ids(store.listRuns("tag:a';DROP-TABLE--")), std::vector<std::int64_t>{id});
    QCOMPARE(ids(store.listRuns("\"tag:x' OR '1'='1\"")).size(), std::size_t(0));
    store.rename(id, "x'; DROP TABLE runs; --");
    QCOMPARE(ids(store.listRuns("\"name=x'; DROP TABLE runs; --\"")), std::vector<std::int64_t>{id});
    QCOMPARE(store.listRuns().size(), std::size_t(1)); // the table is still there
    Statement check(store.database(), "PRAGMA integrity_check");
    QVERIFY(check.step());
    QCOMPARE(check.columnText(0), std::string("ok"));
}

void TestStore::tagsNotesRenameAndDelete()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun("first"));
    const auto other = store.createRun(sampleRun("second"));
    store.appendMetrics({{id, 1, "loss", 2.0, 1}, {other, 1, "loss", 3.0, 1}});
    store.addEvent({id, 1, "info", "x", "y"});
    store.addTag(id, "b");
    store.addTag(id, "a");
    store.addTag(id, "a"); // once
    QCOMPARE(store.run(id)->tags, (std::vector<std::string>{"a", "b"}));
    store.removeTag(id, "b");
    QCOMPARE(store.run(id)->tags, (std::vector<std::string>{"a"}));
    QVERIFY_THROWS_EXCEPTION(InputError, store.addTag(id, ""));
    QVERIFY_THROWS_EXCEPTION(InputError, store.addTag(id, "two words"));
    QVERIFY_THROWS_EXCEPTION(InputError, store.addTag(999, "x"));
    QVERIFY_THROWS_EXCEPTION(InputError, store.rename(id, "tab\there"));
    store.rename(id, "renamed");
    QCOMPARE(store.run(id)->name, std::string("renamed"));

    store.markRunning(other, 100, "cpu", "fp32");
    QVERIFY_THROWS_EXCEPTION(InputError, store.deleteRun(other)); // running
    store.deleteRun(id);
    QVERIFY(!store.run(id).has_value());
    QVERIFY(store.metrics(id).empty());
    QVERIFY(store.events(id).empty());
    QCOMPARE(store.metrics(other).size(), std::size_t(1)); // the other run keeps everything
    QVERIFY_THROWS_EXCEPTION(InputError, store.deleteRun(id));
    // The last run's id is not given again once it is deleted.
    const auto third = store.createRun(sampleRun("third"));
    store.markEnded(third, RunStatus::Finished, {1, 1.0, std::nullopt, std::nullopt, ""});
    store.deleteRun(third);
    QCOMPARE(store.createRun(sampleRun("fourth")), third + 1);
}

// A series for display keeps the first and last point and every bucket's
// lowest and highest, from the points or from the 128-step blocks, and the
// blocks stay exact through replaced values, truncation and deletion.
void TestStore::longSeriesKeepsFirstLastAndSpikes()
{
    RunStore store(dbPath());
    const auto id = store.createRun(sampleRun());
    std::vector<MetricPoint> points;
    const int n = 200000;
    for (int step = 1; step <= n; ++step) {
        double v = 1.0 + 0.001 * (step % 97);
        if (step == 77777) v = 100.0; // a spike
        if (step == 123457) v = -50.0; // a dip
        points.push_back({id, step, "loss", v, static_cast<double>(step) / 10});
    }
    store.appendMetrics(points);
    for (int buckets : {100, 5000}) { // from the blocks, then from the points
        const auto series = store.metricSeries(id, "loss", buckets);
        QVERIFY(series.size() <= 2 * static_cast<std::size_t>(buckets) + 2);
        QVERIFY(series.size() >= static_cast<std::size_t>(buckets));
        QCOMPARE(series.front().step, 1);
        QCOMPARE(series.back().step, n);
        QCOMPARE(series.back().wallTime, n / 10.0);
        QVERIFY(std::is_sorted(series.begin(), series.end(), [](auto& a, auto& b) { return a.step < b.step; }));
        const auto has = [&](int step, double value) {
            return std::any_of(series.begin(), series.end(), [&](auto& p) { return p.step == step && p.value == value; });
        };
        QVERIFY(has(77777, 100.0));
        QVERIFY(has(123457, -50.0));
    }
    // A resume drops what came after its checkpoint, spike included.
    store.truncateMetricsAfter(id, 100000);
    auto series = store.metricSeries(id, "loss", 100);
    QCOMPARE(series.back().step, 100000);
    QVERIFY(std::none_of(series.begin(), series.end(), [](auto& p) { return p.value < 0; }));
    QVERIFY(std::any_of(series.begin(), series.end(), [](auto& p) { return p.value == 100.0; }));
    // A value written again (a retried batch) replaces the old one in the blocks too.
    store.appendMetrics({{id, 77777, "loss", 1.0, 7777.7}});
    series = store.metricSeries(id, "loss", 100);
    QVERIFY(std::none_of(series.begin(), series.end(), [](auto& p) { return p.value == 100.0; }));
    // Short series come back whole.
    store.appendMetrics({{id, 1, "lr", 0.1, 1}, {id, 2, "lr", 0.2, 2}});
    QCOMPARE(store.metricSeries(id, "lr", 100).size(), std::size_t(2));
    QVERIFY(store.metricSeries(id, "missing", 100).empty());
    store.markEnded(id, RunStatus::Finished, {100000, 1.0, std::nullopt, std::nullopt, ""});
    store.deleteRun(id);
    Statement left(store.database(), "SELECT count(*) FROM metric_blocks");
    QVERIFY(left.step());
    QCOMPARE(left.columnInt(0), std::int64_t{0});
}

// A database from an earlier Trainbench (schema 2) opened read-only, as
// `runs` and the History tab do: it is read as it is (nothing is migrated,
// not a byte changes), with what later schemas added read as empty. It
// failed with "no such column: estimated_peak_bytes".
void TestStore::olderSchemaIsReadWithoutMigrating()
{
    std::int64_t id;
    {
        RunStore store(dbPath());
        id = store.createRun(sampleRun("old"));
        std::vector<MetricPoint> points;
        for (int step = 1; step <= 5000; ++step) points.push_back({id, step, "loss", step == 4321 ? 9.0 : 1.0, 1});
        points.push_back({id, 5, "mem_peak_bytes", 4096, 1});
        points.push_back({id, 5, "val_loss", 1.5, 1});
        store.appendMetrics(points);
        store.markEnded(id, RunStatus::Finished, {5000, 1.0, std::nullopt, std::nullopt, ""});
    }
    {
        Database db(dbPath(), Database::Mode::ReadWrite);
        db.exec("DROP INDEX runs_by_origin; ALTER TABLE runs DROP COLUMN origin_host; ALTER TABLE runs DROP COLUMN origin_store; "
                "ALTER TABLE runs DROP COLUMN origin_run_id; ALTER TABLE runs DROP COLUMN origin_label; "
                "ALTER TABLE runs DROP COLUMN estimated_peak_bytes; ALTER TABLE runs DROP COLUMN estimate_json; "
                "ALTER TABLE runs DROP COLUMN measured_peak_bytes; ALTER TABLE runs DROP COLUMN note; "
                "DROP TABLE run_tags; DROP TABLE deleted_runs; DROP TABLE metric_blocks; DROP TABLE run_findings; DROP TABLE sweep_trials; "
                "DROP TABLE sweeps; PRAGMA user_version=2; "
                "PRAGMA wal_checkpoint(TRUNCATE);");
    }
    const auto before = fileBytes(dbPath());
    {
        RunStore store(dbPath(), RunStore::Mode::ReadOnly);
        const auto runs = store.listRuns();
        QCOMPARE(runs.size(), std::size_t(1));
        QCOMPARE(runs[0].measuredPeakBytes, std::optional<std::int64_t>(4096)); // from the metrics
        QCOMPARE(runs[0].bestValLoss, std::optional<double>(1.5));
        QVERIFY(runs[0].note.empty() && runs[0].tags.empty());
        QCOMPARE(store.listRuns("tag:x").size(), std::size_t(0));
        QCOMPARE(store.listRuns("old").size(), std::size_t(1));
        QCOMPARE(store.listRuns("note=x").size(), std::size_t(0));
        const auto series = store.metricSeries(id, "loss", 10); // without blocks: from the points
        QVERIFY(std::any_of(series.begin(), series.end(), [](auto& p) { return p.step == 4321 && p.value == 9.0; }));
        QVERIFY(store.run(id).has_value());
    }
    QCOMPARE(fileBytes(dbPath()), before);
}

// A run's estimate error as History, the Run tab and `runs` print it: an error
// that rounds to zero is "0.0%", not "-0.0%".
void TestStore::estimateErrorsNeverShowMinusZero()
{
    QCOMPARE(signedPercentText(-0.0004), std::string("0.0%"));
    QCOMPARE(signedPercentText(0.0004), std::string("0.0%"));
    QCOMPARE(signedPercentText(-0.0), std::string("0.0%"));
    QCOMPARE(signedPercentText(0.031), std::string("+3.1%"));
    QCOMPARE(signedPercentText(-0.0049), std::string("-0.5%"));
    QCOMPARE(signedPercentText(-0.00049, 2), std::string("-0.05%"));
    QCOMPARE(signedPercentText(std::nan("")), std::string("n/a"));
}

void TestStore::copiedRunKeepsItsOriginAndIsUpdatedInPlace()
{
    RunStore there(dbPath("there.db"));
    const auto id = there.createRun(sampleRun("far"));
    there.markRunning(id, 10, "cuda", "bf16");
    there.appendMetrics({{id, 1, "loss", 2.5, 10.0}, {id, 2, "loss", 2.0, 11.0}, {id, 2, "lr", 1e-3, 11.0}});
    there.addEvent({id, 12.0, "info", "start", "training"});
    auto bundle = bundleFromJson(bundleToJson(bundleOf(there, id)), "bundle");
    QCOMPARE(bundle.metrics.size(), std::size_t(3));

    RunStore here(dbPath("here.db"));
    const auto added = here.importRun(bundle, "gpu");
    QCOMPARE(added.outcome, ImportOutcome::Added);
    // Still running there: no process here owns it, and no reader or reconciliation says otherwise.
    QCOMPARE(here.reconcileInterrupted(), 0);
    auto copy = here.run(added.runId);
    QVERIFY(copy);
    QCOMPARE(copy->status, RunStatus::Running);
    QCOMPARE(copy->origin.runId, id);
    QCOMPARE(copy->origin.label, std::string("gpu"));
    const auto values = [](const std::vector<MetricPoint>& points) {
        std::vector<std::tuple<int, std::string, double, double>> v;
        for (const auto& p : points) v.emplace_back(p.step, p.key, p.value, p.wallTime);
        return v;
    };
    QCOMPARE(values(here.metrics(added.runId)), values(there.metrics(id)));
    QVERIFY(copy->message.find("running on gpu when copied") != std::string::npos);
    QVERIFY_THROWS_EXCEPTION(InputError, here.signalOwner(added.runId, 0));
    QCOMPARE(here.importRun(bundle, "gpu").outcome, ImportOutcome::Unchanged);
    QVERIFY_THROWS_EXCEPTION(InputError, there.importRun(bundle, "file")); // a run of that very store

    // The run ends there: the same copy is updated, its local tag kept.
    here.addTag(added.runId, "keep");
    there.appendMetrics({{id, 3, "loss", 1.5, 12.0}});
    there.markEnded(id, RunStatus::Finished, {3, 1.5, std::nullopt, std::nullopt, "done"});
    const auto updated = here.importRun(bundleOf(there, id), "gpu");
    QCOMPARE(updated.outcome, ImportOutcome::Updated);
    QCOMPARE(updated.runId, added.runId);
    QCOMPARE(here.listRuns().size(), std::size_t(1));
    copy = here.run(added.runId);
    QCOMPARE(copy->status, RunStatus::Finished);
    QCOMPARE(here.metrics(added.runId).size(), std::size_t(4));
    QCOMPARE(copy->tags, std::vector<std::string>{"keep"});
    // A copy of a copy keeps the first origin.
    RunStore third(dbPath("third.db"));
    const auto again = third.importRun(bundleOf(here, added.runId), "laptop");
    QCOMPARE(third.run(again.runId)->origin.runId, id);
    QCOMPARE(third.run(again.runId)->origin.store, bundle.origin.store);
}

QTEST_GUILESS_MAIN(TestStore)
// A /proc file whose process exits between open and read fails the read
// (ESRCH), and libstdc++'s filebuf throws on a failed read whatever the
// stream's exception mask: a data-parallel run whose rank was killed reported
// "basic_filebuf::underflow error reading the file: No such process" instead
// of the lost rank (ProcessGroup's processState read its ranks' stat so).
void TestStore::procFileReadErrorIsNoText()
{
    // The race made deterministic: open a child's stat, let the child exit and
    // reap it, then read.
    const pid_t child = fork();
    if (child == 0) _exit(0);
    QVERIFY(child > 0);
    const std::string statPath = "/proc/" + std::to_string(child) + "/stat";
    std::ifstream opened(statPath);
    QVERIFY(opened.is_open());
    int status = 0;
    QCOMPARE(waitpid(child, &status, 0), child);
    bool threw = false;
    try {
        const std::string text((std::istreambuf_iterator<char>(opened)), std::istreambuf_iterator<char>());
        Q_UNUSED(text);
    } catch (const std::exception&) {
        threw = true;
    }
    QVERIFY2(threw, "reading a reaped process's stat no longer throws here: the test shows nothing");
    // What the liveness checks read instead: no text, no exception.
    QCOMPARE(tb::readSmallFile(statPath), std::string());
    QCOMPARE(tb::store_detail::processStartTime(child), std::string());
    const QTemporaryDir dir; // a directory fails read(2) too (EISDIR)
    QCOMPARE(tb::readSmallFile(dir.path().toStdString()), std::string());
    const std::string own = tb::readSmallFile("/proc/self/stat");
    QVERIFY2(own.find(std::to_string(getpid()) + " (") == 0, own.c_str());
    QVERIFY(!tb::store_detail::processStartTime(getpid()).empty());
}

#include "tst_store.moc"
