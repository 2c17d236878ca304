// Sweep files: parsed as W&B's shape, refused with the field and the fix,
// expanded into trials (a grid in order, a random search reproducibly), each
// trial a valid config; the median rule of early termination; the store's
// queue of trials.
#include <QtTest>

#include <QTemporaryDir>

#include <set>

#include "common/Errors.h"
#include "store/RunStore.h"
#include "tune/Sweep.h"

using namespace tb;

class TestSweep : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void gridInOrder();
    void randomIsSeededAndInRange();
    void badFilesNameTheFieldAndTheFix_data();
    void badFilesNameTheFieldAndTheFix();
    void trialConfigsAreValidated();
    void medianRule();
    void storeKeepsTheQueue();
};

void TestSweep::gridInOrder()
{
    const auto spec = parseSweep(R"({"method": "grid", "metric": {"name": "val_loss", "goal": "minimize"},
        "parameters": {"optim.lr": {"values": [0.001, 0.003]}, "train.batch_size": {"values": [8, 16, 32]},
                       "optim.weight_decay": {"value": 0.1}}})");
    QCOMPARE(spec.parameters.size(), std::size_t{3});
    QCOMPARE(spec.parameters[0].path, std::string("optim.lr")); // the file's order, not sorted
    const auto trials = sweepTrials(spec);
    QCOMPARE(trials.size(), std::size_t{6});
    QCOMPARE(trials[0].describe(), std::string("optim.lr=0.001 train.batch_size=8 optim.weight_decay=0.1"));
    QCOMPARE(trials[1].describe(), std::string("optim.lr=0.001 train.batch_size=16 optim.weight_decay=0.1"));
    QCOMPARE(trials[5].describe(), std::string("optim.lr=0.003 train.batch_size=32 optim.weight_decay=0.1"));
    QCOMPARE(trials[5].toJson(), std::string(R"({"optim.lr":0.003,"train.batch_size":32,"optim.weight_decay":0.1})"));
    auto capped = spec;
    capped.runCap = 4;
    QCOMPARE(sweepTrials(capped).size(), std::size_t{4});
}

void TestSweep::randomIsSeededAndInRange()
{
    const std::string text = R"({"method": "random", "run_cap": 200, "seed": 7, "metric": {"name": "val_accuracy"},
        "parameters": {"optim.lr": {"min": 0.0001, "max": 0.01, "distribution": "log_uniform_values"},
                       "optim.warmup_steps": {"min": 0, "max": 4},
                       "optim.weight_decay": {"min": 0.0, "max": 0.2, "distribution": "q_uniform", "q": 0.05},
                       "optim.optimizer": {"values": ["adamw", "sgd"]}}})";
    const auto spec = parseSweep(text);
    QVERIFY(spec.maximize); // val_accuracy is maximised unless told
    const auto a = sweepTrials(spec), b = sweepTrials(spec);
    QCOMPARE(a.size(), std::size_t{200});
    std::set<std::string> warmups, optimizers;
    int lowLr = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        QCOMPARE(a[i].describe(), b[i].describe());
        const double lr = std::stod(a[i].values[0].second);
        QVERIFY(lr >= 1e-4 && lr <= 1e-2);
        if (lr < 1e-3) ++lowLr;
        warmups.insert(a[i].values[1].second);
        const double decay = std::stod(a[i].values[2].second);
        QVERIFY(std::abs(decay / 0.05 - std::round(decay / 0.05)) < 1e-9);
        optimizers.insert(a[i].values[3].second);
    }
    // Log-uniform: about half the draws below the geometric middle.
    QVERIFY2(lowLr > 70 && lowLr < 130, qPrintable(QString::number(lowLr)));
    QCOMPARE(warmups, (std::set<std::string>{"0", "1", "2", "3", "4"}));
    QCOMPARE(optimizers, (std::set<std::string>{"\"adamw\"", "\"sgd\""}));
    auto other = spec;
    other.seed = 8;
    QVERIFY(sweepTrials(other)[0].describe() != a[0].describe());
}

void TestSweep::badFilesNameTheFieldAndTheFix_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    QTest::newRow("not json") << "{" << "not valid JSON";
    QTest::newRow("unknown field") << R"({"parameter": {}})" << "unknown field \"parameter\"; did you mean \"parameters\"?";
    QTest::newRow("no parameters") << R"({"method": "grid"})" << "parameters: give at least one config field";
    QTest::newRow("bayes") << R"({"method": "bayes", "parameters": {"optim.lr": {"values": [1]}}})" << "\"bayes\" is not supported";
    QTest::newRow("unknown path") << R"({"parameters": {"optim.lrr": {"values": [1]}}})"
                                  << "\"optim.lrr\" is not a config field; did you mean \"optim.lr\"?";
    QTest::newRow("range in a grid") << R"({"parameters": {"optim.lr": {"min": 0.1, "max": 1}}})" << "a grid needs values";
    QTest::newRow("random without cap") << R"({"method": "random", "parameters": {"optim.lr": {"min": 0.1, "max": 1}}})"
                                        << "a random search needs the number of trials";
    QTest::newRow("log of zero") << R"({"method": "random", "run_cap": 2, "parameters": {"optim.lr": {"min": 0, "max": 1, "distribution": "log_uniform_values"}}})"
                                 << "log_uniform_values needs min above 0";
    QTest::newRow("unknown metric") << R"({"metric": {"name": "acc"}, "parameters": {"optim.lr": {"values": [1]}}})"
                                    << "\"acc\" is not a metric a run stores";
    QTest::newRow("hyperband") << R"({"early_terminate": {"type": "hyperband"}, "parameters": {"optim.lr": {"values": [1]}}})"
                               << "must be {\"type\": \"median\"";
    QTest::newRow("empty values") << R"({"parameters": {"optim.lr": {"values": []}}})" << "values: must be a non-empty list";
    QTest::newRow("unknown parameter key") << R"({"parameters": {"optim.lr": {"vales": [1]}}})"
                                           << "unknown key \"vales\"; did you mean \"values\"?";
    QTest::newRow("values and value") << R"({"parameters": {"optim.lr": {"values": [1], "value": 2}}})"
                                      << "give one of values, value, or min and max";
    QTest::newRow("categorical beside values") << R"({"parameters": {"optim.lr": {"values": [1], "distribution": "categorical"}}})"
                                               << "distribution and q go with min and max";
    QTest::newRow("q without q_uniform") << R"({"method": "random", "run_cap": 2, "parameters": {"optim.lr": {"min": 0.1, "max": 1, "q": 0.1}}})"
                                         << "goes with \"distribution\": \"q_uniform\"";
    QTest::newRow("no whole number") << R"({"method": "random", "run_cap": 2, "parameters": {"train.batch_size": {"min": 0.5, "max": 0.7, "distribution": "int_uniform"}}})"
                                     << "int_uniform needs a whole number between min and max";
    QTest::newRow("hyperband's min_iter") << R"({"early_terminate": {"type": "median", "min_iter": 3}, "parameters": {"optim.lr": {"values": [1]}}})"
                                          << "unknown key \"min_iter\"";
    QTest::newRow("goal not a string") << R"({"metric": {"name": "loss", "goal": 1}, "parameters": {"optim.lr": {"values": [1]}}})"
                                       << "metric.goal: must be";
}

void TestSweep::badFilesNameTheFieldAndTheFix()
{
    QFETCH(QString, text);
    QFETCH(QString, message);
    try {
        (void)sweepTrials(parseSweep(text.toStdString(), "s.json"));
        QFAIL("accepted");
    } catch (const InputError& e) {
        QVERIFY2(QString::fromStdString(e.what()).contains(message), e.what());
        QVERIFY2(QString::fromStdString(e.what()).startsWith("s.json: "), e.what());
    }
}

void TestSweep::trialConfigsAreValidated()
{
    RunConfig base;
    base.device = "cpu";
    base.train.batchSize = 32;
    const auto spec = parseSweep(R"({"parameters": {"train.batch_size": {"values": [8, -1]}, "optim.lr": {"value": 0.01}}})");
    const auto trials = sweepTrials(spec);
    const auto c = trialConfig(base, trials[0]);
    QCOMPARE(c.train.batchSize, 8);
    QCOMPARE(c.optim.lr, 0.01);
    try {
        (void)trialConfig(base, trials[1]);
        QFAIL("accepted batch -1");
    } catch (const ConfigError& e) {
        QVERIFY2(QString::fromStdString(e.what()).contains("train.batch_size"), e.what());
        QVERIFY2(QString::fromStdString(e.what()).contains("trial 2"), e.what());
    }
}

void TestSweep::medianRule()
{
    QVERIFY(!worseThanMedian(5.0, {1.0}, false));           // one other: no median to speak of
    QVERIFY(worseThanMedian(5.0, {1.0, 2.0}, false));       // above the median 1.5
    QVERIFY(!worseThanMedian(1.2, {1.0, 2.0}, false));
    QVERIFY(!worseThanMedian(1.5, {1.0, 2.0}, false));      // equal is not worse
    QVERIFY(worseThanMedian(0.4, {0.5, 0.9, 0.7}, true));   // accuracy under the median 0.7
    QVERIFY(worseThanMedian(std::nan(""), {1.0, 2.0}, false)); // a diverged trial
    QVERIFY(!worseThanMedian(1.0, {std::nan(""), 2.0}, false)); // NaN others do not count
}

void TestSweep::storeKeepsTheQueue()
{
    QTemporaryDir dir;
    const std::string db = dir.filePath("exp.db").toStdString();
    std::int64_t id = 0;
    {
        RunStore store(db);
        SweepRecord r;
        r.name = "lr sweep";
        r.specJson = R"({"parameters": {"optim.lr": {"values": [0.1, 0.2]}}})";
        r.configJson = "{}";
        r.budgetBytes = 1 << 20;
        for (int i = 0; i < 2; ++i) {
            SweepTrialRecord t;
            t.trial = i;
            t.valuesJson = i == 0 ? R"({"optim.lr":0.1})" : R"({"optim.lr":0.2})";
            r.trials.push_back(t);
        }
        id = store.createSweep(r);
        const auto run = store.createRun({"r", "{}", "cpu", "fp32", "0.1.0", "1.13", 10});
        auto t = store.sweep(id)->trials[1];
        t.status = "finished";
        t.runId = run;
        t.metric = 1.25;
        store.updateSweepTrial(t);
        store.setSweepStatus(id, "finished");
    }
    RunStore store(db, RunStore::Mode::ReadOnly);
    const auto r = store.sweep(id);
    QVERIFY(r);
    QCOMPARE(r->name, std::string("lr sweep"));
    QCOMPARE(r->status, std::string("finished"));
    QCOMPARE(r->budgetBytes, std::int64_t{1 << 20});
    QCOMPARE(r->trials.size(), std::size_t{2});
    QCOMPARE(r->trials[0].status, std::string("pending"));
    QCOMPARE(r->trials[1].status, std::string("finished"));
    QCOMPARE(*r->trials[1].metric, 1.25);
    const auto of = store.sweepTrialOfRun(*r->trials[1].runId);
    QVERIFY(of && of->sweepId == id && of->trial == 1);
    QCOMPARE(store.listSweeps().size(), std::size_t{1});
    QVERIFY(!store.sweep(id + 1));
}

QTEST_GUILESS_MAIN(TestSweep)
#include "tst_sweep.moc"
