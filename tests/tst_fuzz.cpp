// Fuzzing: random and mutated configs and database files, and random CLI
// argument vectors. Nothing may crash, every rejection must be one of the
// project's own errors, and a database that was only read must not change.
// About 2 minutes on 2 cores (over the suite's usual 120 s): 10,000 mutated
// configs, 10,000 damaged database files (each opened, queried and compared
// after) and 10,000 argument vectors in process, then 100 trainbench-cli
// processes on random arguments: enough draws that every field and
// subcommand is hit many times.
#include <QtTest>

#include <fstream>
#include <random>

#include "TestPaths.h"
#include "Command.h"
#include "TestPrinters.h"
#include "config/RunConfig.h"
#include "store/RunStore.h"
#include "store/Sqlite.h"

using namespace tb;

namespace {

const char* const kSeedConfig = R"({"name": "fuzz", "device": "cpu",
 "model": {"type": "gpt", "n_layer": 2, "d_model": 64, "n_head": 4, "positional_encoding": "rope", "dropout": 0.1},
 "data": {"source": "addition", "digits": 2},
 "optim": {"optimizer": "adamw", "lr": 0.001, "betas": [0.9, 0.99], "weight_decay": 0.01, "warmup_steps": 10},
 "train": {"batch_size": 8, "steps": 20, "seed": 3, "precision": "fp32", "checkpoint_every": 5},
 "lora": {"rank": 4, "alpha": 8, "targets": ["attn"]}})";

// One random edit: flip, insert, delete or duplicate bytes, or splice in a
// JSON token that is likely to matter.
std::string mutate(std::string text, std::mt19937& random)
{
    static const char* const tokens[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "-1", "1e400", "0",
                                         "2147483648", "\"\\u0000\"", "\"\xff\xfe\"", "[[[[[[[[", "{\"a\":", "NaN"};
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
        const std::size_t at = random() % text.size();
        switch (random() % 5) {
        case 0: text[at] = static_cast<char>(random() % 256); break;
        case 1: text.insert(at, tokens[random() % std::size(tokens)]); break;
        case 2: text.erase(at, 1 + random() % 8); break;
        case 3: text.insert(at, text.substr(at, 1 + random() % 16)); break;
        default: text.insert(at, std::string(1 + random() % 3, static_cast<char>(random() % 128))); break;
        }
    }
    return text;
}

// Valid JSON, one leaf replaced: a number scaled, negated or made huge, a
// string or list where a number was, and so on.
std::string mutateValue(const std::string& text, std::mt19937& random)
{
    static const char* const values[] = {"0", "-1", "1", "3", "0.5", "1e9", "-1e-9", "2147483647", "2147483648",
                                         "-2147483649", "1.5", "\"\"", "\"auto\"", "\"x\"", "null", "true",
                                         "[]", "{}", "[1]", "[0.9]", "[\"attn\", \"mlp\", \"qkv\"]",
                                         "\"rope\"", "\"llama\"", "\"bf16\"", "\"fp16\"", "\"cuda:3\""};
    // Leaves are the values after a ':' (or inside a list) up to ',', '}' or ']'.
    std::vector<std::pair<std::size_t, std::size_t>> leaves;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] != ':' && text[i] != '[') continue;
        std::size_t start = i + 1;
        while (start < text.size() && text[start] == ' ') ++start;
        if (start >= text.size() || text[start] == '{' || text[start] == '[') continue;
        std::size_t end = start;
        bool inString = false;
        while (end < text.size() && (inString || (text[end] != ',' && text[end] != '}' && text[end] != ']'))) {
            if (text[end] == '"') inString = !inString;
            ++end;
        }
        leaves.emplace_back(start, end);
    }
    std::string out = text;
    const auto [start, end] = leaves[random() % leaves.size()];
    out.replace(start, end - start, values[random() % std::size(values)]);
    return out;
}

std::string fileBytes(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

class TestFuzz : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void tenThousandConfigs();
    void tenThousandDatabaseFiles();
    void tenThousandArgumentVectors();
    void randomCommandLines();
};

void TestFuzz::tenThousandConfigs()
{
    std::mt19937 random(1);
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 10000; ++i) {
        // Mostly mutations of a valid config; every tenth is random bytes.
        // Half the inputs keep the JSON valid and change one value's type or range.
        std::string text = i % 10 == 9 ? std::string(random() % 200, '\0')
                         : i % 2 == 0  ? mutateValue(kSeedConfig, random)
                                       : mutate(kSeedConfig, random);
        if (i % 10 == 9) for (auto& c : text) c = static_cast<char>(random() % 256);
        try {
            const auto config = parseConfig(text, "fuzz");
            (void)validateConfig(config, false);
            (void)configToJson(config); // what is stored for a run must serialise
            ++accepted;
        } catch (const ConfigError& e) {
            QVERIFY(std::string(e.what()).size() < 4000); // one message, not a dump
            ++rejected;
        } catch (const std::exception& e) {
            QFAIL(qPrintable(QString("input %1: not a config error: %2").arg(i).arg(e.what())));
        }
    }
    qInfo("configs: %d accepted, %d rejected with a config error", accepted, rejected);
}

void TestFuzz::tenThousandDatabaseFiles()
{
    QTemporaryDir dir;
    const std::string good = dir.filePath("good.db").toStdString();
    {
        RunStore store(good);
        const auto id = store.createRun({"r", kSeedConfig, "cpu", "fp32", "0.1.0", "1.13", 20});
        std::vector<MetricPoint> points;
        for (int step = 1; step <= 200; ++step) points.push_back({id, step, "loss", 1.0 / step, 1.0 * step});
        store.appendMetrics(points);
        store.addEvent({id, 1.0, "info", "test", "hello"});
        store.markEnded(id, RunStatus::Finished, {20, 0.5, 0.6, std::nullopt, "done"});
        store.database().exec("PRAGMA wal_checkpoint(TRUNCATE)");
    }
    const std::string original = fileBytes(good);
    std::mt19937 random(2);
    int opened = 0, refused = 0;
    const std::string path = dir.filePath("mutated.db").toStdString();
    for (int i = 0; i < 10000; ++i) {
        std::string bytes = original;
        // A few bytes changed anywhere, or the file cut short.
        if (i % 8 == 7) {
            bytes.resize(random() % bytes.size());
        } else {
            const int flips = 1 + static_cast<int>(random() % 8);
            for (int f = 0; f < flips; ++f) bytes[random() % bytes.size()] = static_cast<char>(random() % 256);
        }
        { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; }
        try {
            RunStore store(path, RunStore::Mode::ReadOnly);
            for (const auto& run : store.listRuns()) {
                (void)store.metrics(run.id);
                (void)store.events(run.id);
                (void)store.artifacts(run.id);
            }
            ++opened;
        } catch (const StoreError&) {
            ++refused; // one clear sentence (StoreError is an InputError)
        } catch (const std::exception& e) {
            QFAIL(qPrintable(QString("file %1: %2").arg(i).arg(e.what())));
        }
        QVERIFY2(fileBytes(path) == bytes, "a read-only open changed the file");
    }
    qInfo("database files: %d read, %d refused", opened, refused);
}

void TestFuzz::tenThousandArgumentVectors()
{
    // The option parser every subcommand uses, in process.
    const std::vector<cli::OptionSpec> specs{{"--db", true, "", "FILE"},
                                             {"--output", true, "", "FILE"},
                                             {"--prompt", true, "", "TEXT"},
                                             {"--steps", true, "", "N"},
                                             {"--json", false, ""},
                                             {"--merge-lora", false, ""}};
    const std::vector<std::string> words{"--db", "--output", "--prompt", "--steps", "--json", "--merge-lora", "--",
                                         "-", "--db=", "--json=1", "--steps=-5", "--unknown", "1", "", "=", "x=y",
                                         "99999999999999999999", "\xff\xfe", "--help", "-h", "--Db"};
    std::mt19937 random(4);
    int parsed = 0, refused = 0;
    for (int i = 0; i < 10000; ++i) {
        std::vector<std::string> argv;
        const int n = static_cast<int>(random() % 7);
        for (int k = 0; k < n; ++k) {
            std::string w = words[random() % words.size()];
            if (random() % 10 == 0) w += static_cast<char>(random() % 256);
            argv.push_back(w);
        }
        try {
            const cli::Args args("fuzz", specs, argv);
            (void)args.integer("--steps", 1, 1000000);
            if (!args.positionals().empty()) (void)args.runId();
            ++parsed;
        } catch (const InputError&) {
            ++refused;
        } catch (const std::exception& e) {
            QFAIL(qPrintable(QString("vector %1: %2").arg(i).arg(e.what())));
        }
    }
    qInfo("argument vectors: %d parsed, %d refused with an input error", parsed, refused);
}

void TestFuzz::randomCommandLines()
{
    // Process starts are slow (LibTorch loads): a hundred vectors of real and
    // random words through the real binary.
    QTemporaryDir dir;
    const QString db = dir.filePath("exp.db");
    {
        RunStore store(db.toStdString());
        store.createRun({"r", kSeedConfig, "cpu", "fp32", "0.1.0", "1.13", 20});
    }
    const auto before = fileBytes(db.toStdString());
    const QStringList words{"runs", "export", "export-model", "sample", "validate", "devices", "resume", "1", "0",
                            "-1", "99999999999999999999", "--db", db, "--json", "--format", "csv", "json", "xml",
                            "--output", "--prompt", "", "--max-tokens", "--temperature", "nan", "--top-k",
                            "--seed", "--checkpoint", "/", "--catalog", "--gpu", "--config", "--help", "-h", "--",
                            "--db=", "=", "\xc3\x28", "--merge-lora", "--filter", "tag:x", "status=",
                            "train.batch_size>=", "\"", "x'; DROP TABLE runs;--"};
    std::mt19937 random(3);
    for (int i = 0; i < 100; ++i) {
        // Only read-only commands: train and resume would legitimately write.
        QStringList args{QStringList{"runs", "export", "export-model", "sample", "validate", "devices", "compare"}[random() % 7]};
        const int n = static_cast<int>(random() % 6);
        for (int k = 0; k < n; ++k) args << words[random() % words.size()];
        if (args.contains("resume")) continue;
        if (args.first() == "export-model" || args.first() == "export") {
            // Never point them at a real output folder of ours.
            for (auto& a : args) if (a == "/") a = dir.filePath("out");
        }
        QProcess p;
        p.start(TB_CLI_PATH, args);
        QVERIFY(p.waitForFinished(60000));
        QVERIFY2(p.exitStatus() == QProcess::NormalExit, qPrintable("crashed: " + args.join(' ')));
        QVERIFY2(p.exitCode() == 0 || p.exitCode() == 1 || p.exitCode() == 2,
                 qPrintable(QString("exit %1: %2").arg(p.exitCode()).arg(args.join(' '))));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(!err.contains("terminate called"), qPrintable(args.join(' ') + ": " + err));
    }
    QVERIFY2(fileBytes(db.toStdString()) == before, "a reading command changed the database");
}

QTEST_GUILESS_MAIN(TestFuzz)
#include "tst_fuzz.moc"
