// The data-parallel process group's backends, one rank on loopback: a CPU run
// uses Gloo for everything; a CUDA run, where this LibTorch has NCCL (the CUDA
// build of the 2.x tree), creates ProcessGroupNCCL with the launch's timeout
// and sends CUDA tensors' collectives there, CPU tensors' to Gloo. Without a
// GPU, ProcessGroupNCCL's constructor refuses ("no GPUs found"), which shows
// that the CUDA run chose it; on a GPU machine the group itself is checked.
#include <QtTest>

#include <netinet/in.h>
#include <sys/socket.h>
#include <csignal>
#include <unistd.h>

#include <cstdio>

#include <ATen/ATen.h>

#include "TestPaths.h"
#include "common/Errors.h"
#include "dist/ProcessGroup.h"

using namespace tb;

namespace {

int freePort()
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    const int port = ntohs(address.sin_port);
    close(fd);
    return port;
}

DistLaunch oneRank()
{
    DistLaunch launch;
    launch.worldSize = 1;
    launch.masterAddr = "127.0.0.1";
    launch.masterPort = freePort();
    launch.launcher = "tst_dist_group";
    launch.timeoutSeconds = 123;
    return launch;
}

} // namespace

class TestDistGroup : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void cpuRunUsesGloo();
    void cudaRunChoosesNccl();
    void cudaBuildLinksNccl();
};

void TestDistGroup::cpuRunUsesGloo()
{
    // A rank ignores SIGPIPE: a peer killed mid-collective must surface as a
    // Gloo error the trainer explains, not kill this rank (it did, in one kill
    // -9 of rank 1 of three, before the run was marked failed).
    ::signal(SIGPIPE, SIG_DFL);
    DistGroup group(oneRank(), false);
    struct sigaction pipe {};
    QCOMPARE(::sigaction(SIGPIPE, nullptr, &pipe), 0);
    QVERIFY(pipe.sa_handler == SIG_IGN);
    QCOMPARE(group.backendFor(false), std::string("gloo"));
    QCOMPARE(group.backendFor(true), std::string("gloo"));
    QCOMPARE(group.ncclTimeout().count(), 0);
    auto t = at::ones({3});
    group.allreduce(t, Reduce::Sum);
    QCOMPARE(t.sum().item<float>(), 3.0f);
    QCOMPARE(group.backendFor(t), std::string("gloo"));
}

void TestDistGroup::cudaRunChoosesNccl()
{
    const auto launch = oneRank();
    if (!DistGroup::ncclBuilt()) {
        // A LibTorch without NCCL: a CUDA run's tensors go through Gloo.
        DistGroup group(launch, true);
        QCOMPARE(group.backendFor(true), std::string("gloo"));
        return;
    }
    // With NCCL the CUDA run creates ProcessGroupNCCL. Without a GPU its
    // constructor refuses, and that refusal is the proof the group chose it;
    // on a GPU machine the group is there, with the launch's timeout.
    try {
        DistGroup group(launch, true);
        QCOMPARE(group.backendFor(true), std::string("nccl"));
        QCOMPARE(group.backendFor(false), std::string("gloo")); // the control plane and CPU tensors
        QCOMPARE(group.ncclTimeout().count(), static_cast<long long>(launch.timeoutSeconds) * 1000);
        // A CPU tensor of a CUDA run (a metric) still goes through Gloo.
        auto t = at::full({2}, 2.0f);
        group.allreduce(t, Reduce::Max);
        QCOMPARE(t.sum().item<float>(), 4.0f);
    } catch (const RunError& e) {
        const QString what = QString::fromUtf8(e.what());
        QVERIFY2(what.contains("creating the ranks' NCCL group failed") && what.contains("GPU"), e.what());
    }
    // The same launch on the CPU never touches NCCL.
    DistGroup cpu(oneRank(), false);
    QCOMPARE(cpu.backendFor(true), std::string("gloo"));
}

// The CUDA build of the 2.x tree has NCCL in c10d and trainbench-cli's
// LibTorch program links ProcessGroupNCCL; a CPU-only LibTorch has neither.
void TestDistGroup::cudaBuildLinksNccl()
{
#ifdef TB_TEST_TORCH_CUDA
    QVERIFY2(DistGroup::ncclBuilt(), "a CUDA LibTorch's c10d has NCCL (USE_C10D_NCCL)");
    const QString program = QFileInfo(QString::fromLocal8Bit(TB_CLI_PATH)).absolutePath() + "/../lib/trainbench/trainbench-cli-torch";
    QProcess nm;
    nm.start("nm", {"-DC", "--undefined-only", program});
    QVERIFY2(nm.waitForFinished(60000) && nm.exitCode() == 0, qPrintable(program + ": " + nm.readAllStandardError()));
    const QString symbols = QString::fromLocal8Bit(nm.readAllStandardOutput());
    QVERIFY2(symbols.contains("c10d::ProcessGroupNCCL::ProcessGroupNCCL("), qPrintable(program));
#else
    QVERIFY(!DistGroup::ncclBuilt());
#endif
}

QTEST_GUILESS_MAIN(TestDistGroup)
#include "tst_dist_group.moc"
