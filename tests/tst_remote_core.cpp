// The SHA-256 behind `train --send-data`, on FIPS 180-4's published examples
// fed in uneven pieces (so the buffering across update() calls is exercised,
// which whole-file reads in 64-byte multiples never do). tst_remote.py checks
// the same code end to end against Python's hashlib.
#include <QtTest>

#include <string>
#include <vector>

#include "remote/Sha256.h"
#include "remote/Ssh.h"

using tb::remote::Sha256;

class TestRemoteCore : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void sha256OfThePublishedExamples_data();
    void sha256OfThePublishedExamples();
    void unresolvedNameIsTheHostsNotTheUsers();
};

// "the name me@ does not resolve": ssh names the host part; so does the sentence.
void TestRemoteCore::unresolvedNameIsTheHostsNotTheUsers()
{
    tb::remote::Host host;
    host.name = "gpu";
    host.destination = "me@gpu-box.invalid";
    tb::remote::SshResult r;
    r.exitCode = 255;
    r.err = "ssh: Could not resolve hostname gpu-box.invalid: Name or service not known\r\n";
    const QString sentence = QString::fromStdString(tb::remote::connectionFailure(host, r));
    QVERIFY2(sentence.startsWith("the name gpu-box.invalid does not resolve"), qPrintable(sentence));
    host.destination = "gpu-box.invalid";
    QVERIFY(QString::fromStdString(tb::remote::connectionFailure(host, r)).startsWith("the name gpu-box.invalid does not resolve"));
}

void TestRemoteCore::sha256OfThePublishedExamples_data()
{
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<QString>("digest");
    QTest::newRow("empty") << QByteArray() << "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    QTest::newRow("abc") << QByteArray("abc") << "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    QTest::newRow("448 bits") << QByteArray("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")
                              << "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
    QTest::newRow("896 bits")
        << QByteArray("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu")
        << "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1";
    QTest::newRow("a million a") << QByteArray(1000000, 'a') << "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
}

void TestRemoteCore::sha256OfThePublishedExamples()
{
    QFETCH(QByteArray, input);
    QFETCH(QString, digest);
    Sha256 whole;
    whole.update(input.constData(), static_cast<std::size_t>(input.size()));
    QCOMPARE(QString::fromStdString(whole.hex()), digest);
    // The same bytes in pieces of 1, 3, 7, 63, 64, 65, 1000 ... bytes.
    const std::vector<int> pieces{1, 3, 7, 63, 64, 65, 1000, 4093};
    Sha256 pieced;
    int at = 0;
    for (std::size_t i = 0; at < input.size(); ++i) {
        const int n = std::min<int>(pieces[i % pieces.size()], static_cast<int>(input.size()) - at);
        pieced.update(input.constData() + at, static_cast<std::size_t>(n));
        at += n;
    }
    QCOMPARE(QString::fromStdString(pieced.hex()), digest);
}

QTEST_GUILESS_MAIN(TestRemoteCore)
#include "tst_remote_core.moc"
