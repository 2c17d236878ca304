// How a process learns its place in a data-parallel run from the environment
// its launcher set: trainbench-cli --nproc, torchrun (with and without its
// agent store) and srun, and the errors that name the variable and its value.
// The processes themselves are tested by tst_data_parallel.py.
#include <QtTest>

#include <map>
#include <string>

#include "common/Errors.h"
#include "dist/DistLaunch.h"

using Env = std::map<std::string, std::string>;

namespace {

std::optional<tb::DistLaunch> launchOf(const Env& env, std::string* expandedList = nullptr)
{
    return tb::distLaunchFromEnvironment(
        [&](const char* name) -> const char* {
            const auto it = env.find(name);
            return it == env.end() ? nullptr : it->second.c_str();
        },
        [&](const std::string& list) {
            if (expandedList) *expandedList = list;
            return std::string("node017");
        });
}

QString errorOf(const Env& env)
{
    try {
        launchOf(env);
    } catch (const tb::InputError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

} // namespace

class TestDistLaunch : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void aPlainProcessIsNoLaunch()
    {
        QVERIFY(!launchOf({}));
        QVERIFY(!launchOf({{"WORLD_SIZE", "1"}, {"RANK", "0"}}));
        // The batch script of a Slurm job is one process, whatever the allocation.
        QVERIFY(!launchOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "77"}}));
    }

    void torchrunsVariables()
    {
        const auto d = launchOf({{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.2"},
                                 {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RUN_ID", "none"},
                                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
        QVERIFY(d);
        QCOMPARE(d->rank, 3);
        QCOMPARE(d->localRank, 1);
        QCOMPARE(d->worldSize, 4);
        QCOMPARE(d->masterAddr, std::string("10.0.0.2"));
        QCOMPARE(d->masterPort, 29400);
        QVERIFY(d->agentStore);
        QCOMPARE(d->storePrefix, std::string("/worker/attempt_2"));
        QCOMPARE(d->launcher, std::string("torchrun"));
        // Without the agent store, rank 0 serves it and there is no prefix.
        const auto own = launchOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"},
                                   {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
        QVERIFY(own && !own->agentStore && own->storePrefix.empty());
        QCOMPARE(own->localRank, 0); // LOCAL_RANK unset: the rank
    }

    void slurmFillsWhatIsMissing()
    {
        std::string expanded;
        const auto d = launchOf({{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_STEP_NUM_TASKS", "8"},
                                 {"SLURM_NTASKS", "8"}, {"SLURM_JOB_NODELIST", "node[017-020]"}, {"SLURM_JOB_ID", "123456"}},
                                &expanded);
        QVERIFY(d);
        QCOMPARE(d->rank, 5);
        QCOMPARE(d->localRank, 1);
        QCOMPARE(d->worldSize, 8);
        QCOMPARE(expanded, std::string("node[017-020]")); // handed to scontrol, not parsed here
        QCOMPARE(d->masterAddr, std::string("node017"));
        QCOMPARE(d->masterPort, tb::slurmPortForJob(123456));
        QCOMPARE(d->launcher, std::string("srun"));
        // Every task of a job derives the same port, and it is a usable one.
        QVERIFY(d->masterPort >= 1024 && d->masterPort <= 65535);
        // torchrun-style variables win over Slurm's.
        const auto both = launchOf({{"SLURM_PROCID", "5"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                                    {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1234"}});
        QVERIFY(both);
        QCOMPARE(both->rank, 1);
        QCOMPARE(both->worldSize, 2);
        QCOMPARE(both->masterPort, 1234);
    }

    void glooInterfaceIsRead()
    {
        const auto d = launchOf({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"},
                                 {"GLOO_SOCKET_IFNAME", "eth1"}});
        QVERIFY(d);
        QCOMPARE(d->socketInterface, std::string("eth1"));
    }

    void errorsNameTheVariableAndValue()
    {
        const Env base{{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
        auto with = [&](Env extra) {
            Env e = base;
            for (auto& [k, v] : extra) e[k] = v;
            return e;
        };
        QString e = errorOf(with({{"RANK", "2"}}));
        QVERIFY2(e.contains("RANK is 2") && e.contains("WORLD_SIZE is 2"), qPrintable(e));
        e = errorOf(with({{"RANK", "x"}}));
        QVERIFY2(e.contains("RANK is \"x\""), qPrintable(e));
        e = errorOf(with({{"RANK", "0"}, {"MASTER_PORT", "70000"}}));
        QVERIFY2(e.contains("MASTER_PORT is \"70000\""), qPrintable(e));
        e = errorOf(with({{"RANK", "0"}, {"WORLD_SIZE", "0"}}));
        QVERIFY2(e.contains("WORLD_SIZE is \"0\""), qPrintable(e));
        e = errorOf({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
        QVERIFY2(e.contains("RANK is not set"), qPrintable(e));
        e = errorOf({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_PORT", "1"}});
        QVERIFY2(e.contains("MASTER_ADDR is not set"), qPrintable(e));
        e = errorOf({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"}});
        QVERIFY2(e.contains("MASTER_PORT is not set"), qPrintable(e));
        e = errorOf({{"RANK", "1"}});
        QVERIFY2(e.contains("WORLD_SIZE is not set"), qPrintable(e));
    }
};

QTEST_APPLESS_MAIN(TestDistLaunch)
#include "tst_dist_launch.moc"
