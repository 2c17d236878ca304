// Every positional encoding learns 2-digit addition with the bundled addition
// architecture (resources/examples/addition.json: GPT, 3 layers, d_model 128,
// 4 heads): batch 128, lr 1e-3, 50 warmup steps, cosine, 500 steps, one
// thread. Held-out exact match must reach 90% on seed 1 and 80% on seeds 2
// and 3. About a minute a row on the development machine.
#include <QtTest>

#include "TestPrinters.h"

#include "config/RunConfig.h"
#include "train/Trainer.h"

using namespace tb;

class TestPositionalEncodings : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void learnsTwoDigitAddition_data();
    void learnsTwoDigitAddition();
};

void TestPositionalEncodings::learnsTwoDigitAddition_data()
{
    QTest::addColumn<QString>("encoding");
    QTest::addColumn<int>("seed");
    QTest::addColumn<double>("bar");
    for (const char* encoding : {"learned", "sinusoidal", "rope"}) {
        for (int seed : {1, 2, 3}) {
            QTest::addRow("%s seed %d", encoding, seed) << QString(encoding) << seed << (seed == 1 ? 0.9 : 0.8);
        }
    }
}

void TestPositionalEncodings::learnsTwoDigitAddition()
{
    QFETCH(QString, encoding);
    QFETCH(int, seed);
    QFETCH(double, bar);
    RunConfig config = loadConfigFile(TB_SOURCE_DIR "/resources/examples/addition.json");
    // The bundled architecture is the point of the test: fail loudly if it moves.
    QCOMPARE(config.model.type, std::string("gpt"));
    QCOMPARE(config.model.nLayer, 3);
    QCOMPARE(config.model.dModel, 128);
    QCOMPARE(config.model.nHead, 4);
    QVERIFY(!config.model.tieEmbeddings);
    QCOMPARE(config.optim.lr, 1e-3);
    QCOMPARE(config.optim.warmupSteps, 50);
    QCOMPARE(config.optim.schedule, std::string("cosine"));
    QCOMPARE(config.train.batchSize, 128);
    config.device = "cpu";
    config.model.positionalEncoding = encoding.toStdString();
    config.data.digits = 2;
    config.train.steps = 500;
    config.train.evalEvery = 500;
    config.train.seed = static_cast<std::uint64_t>(seed);
    config.train.threads = 1;
    Trainer trainer(config, {});
    const auto result = trainer.run({});
    QCOMPARE(result.status, TrainResult::Status::Finished);
    qInfo("%s, seed %d: held-out exact match %.1f%%", qPrintable(encoding), seed, 100.0 * result.finalValAccuracy);
    QVERIFY2(result.finalValAccuracy >= bar, qPrintable(QString("held-out exact match %1%, needs %2%")
                                                            .arg(100.0 * result.finalValAccuracy, 0, 'f', 1)
                                                            .arg(100.0 * bar)));
}

QTEST_GUILESS_MAIN(TestPositionalEncodings)
#include "tst_positional_encodings.moc"
