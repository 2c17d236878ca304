#include "dist/ProcessGroup.h"

#include "common/Files.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
// A CUDA LibTorch's c10d has NCCL (its torch_cuda target defines USE_C10D_NCCL).
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "common/Errors.h"

namespace tb {
namespace {


std::string thisHost()
{
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    return name;
}

// The address of this machine's interface that reaches `host` (a UDP
// "connect" sends nothing; it only picks the route).
std::string localAddressTowards(const std::string& host, int port)
{
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || !found) {
        throw InputError("MASTER_ADDR is \"" + host + "\", which does not resolve to an address here");
    }
    std::string address;
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
        sockaddr_in local{};
        socklen_t length = sizeof local;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
            char text[INET_ADDRSTRLEN] = {0};
            if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) address = text;
        }
    }
    if (fd >= 0) close(fd);
    freeaddrinfo(found);
    if (address.empty()) throw InputError("no network interface here reaches MASTER_ADDR \"" + host + "\"");
    return address;
}

// LibTorch 2.x's TCPStore asks for libuv by default, which Debian's 2.6 is
// built without ("use_libuv was requested but PyTorch was build without
// libuv support"); 1.13 has no such option. The classic backend serves both.
template <typename Options>
auto useClassicStore(Options& o, int) -> decltype(o.useLibUV = false, void())
{
    o.useLibUV = false;
}
template <typename Options>
void useClassicStore(Options&, long)
{
}

// A process's state letter from /proc (R, S, D, T, Z, ...); 'X' when it is gone.
char processState(long pid)
{
    if (pid <= 0 || kill(static_cast<pid_t>(pid), 0) != 0) return 'X';
    // The process can exit between the check above and the read: then the
    // read fails and it is gone. A stat that cannot be read otherwise (/proc
    // hidden) says nothing: '?'.
    const std::string text = readSmallFile("/proc/" + std::to_string(pid) + "/stat");
    if (text.empty()) return kill(static_cast<pid_t>(pid), 0) != 0 ? 'X' : '?';
    const auto close = text.rfind(')');
    return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}
std::string lastLineOf(const std::string& path)
{
    std::ifstream in(path);
    std::string line, last;
    while (std::getline(in, line)) {
        if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
    }
    return last;
}

} // namespace

// The class a backend's collectives are called on: 2.x splits the backends
// (Gloo, NCCL) from the ProcessGroup that dispatches to them; in 1.13 each
// backend is a ProcessGroup.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

struct DistGroup::Impl {
    DistLaunch launch;
    c10::intrusive_ptr<c10d::Store> store;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;
#ifdef USE_C10D_NCCL
    c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl; // a CUDA run's CUDA tensors
#endif
    // The backend that carries a tensor's collectives.
    CollectiveBackend* backendFor(bool cudaTensor) const
    {
#ifdef USE_C10D_NCCL
        if (cudaTensor && nccl) return nccl.get();
#endif
        (void)cudaTensor;
        return gloo.get();
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> started;
    std::chrono::milliseconds timeout{300000};
    std::string host;
    std::vector<std::pair<std::string, long>> peers; // each rank's host and pid
    std::string runFolder;
};

DistGroup::DistGroup(const DistLaunch& launch, bool cudaRun) : m(std::make_unique<Impl>())
{
    // A peer that dies mid-collective leaves a socket whose next write raises
    // SIGPIPE, which killed this rank before it could mark the run failed and
    // name the lost rank ("rank 0 was killed by signal 13" in the launcher's
    // words, one kill -9 of rank 1 in three here). Ignored, the write fails
    // with EPIPE and Gloo reports it as an error the trainer explains.
    ::signal(SIGPIPE, SIG_IGN);
    m->launch = launch;
    m->timeout = std::chrono::milliseconds(static_cast<long long>(launch.timeoutSeconds) * 1000);
    m->host = thisHost();
    const std::string where = launch.masterAddr + ":" + std::to_string(launch.masterPort);
    c10d::TCPStoreOptions so;
    so.port = static_cast<std::uint16_t>(launch.masterPort);
    so.isServer = launch.rank == 0 && !launch.agentStore;
    so.waitWorkers = false;
    so.timeout = m->timeout;
    useClassicStore(so, 0);
    try {
        auto tcp = c10::make_intrusive<c10d::TCPStore>(launch.masterAddr, so);
        const std::string prefix = launch.agentStore ? launch.storePrefix + "/trainbench" : std::string("trainbench");
        m->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    } catch (const std::exception& e) {
        const std::string what = firstLine(e.what());
        if (so.isServer && (what.find("in use") != std::string::npos || what.find("EADDRINUSE") != std::string::npos)) {
            throw InputError("MASTER_PORT " + std::to_string(launch.masterPort) + " is already in use on this machine: rank 0 "
                             "cannot serve the rendezvous there; pick a free port (MASTER_PORT, or leave it unset with --nproc)");
        }
        throw InputError("rank " + std::to_string(launch.rank) + " cannot reach the rendezvous at MASTER_ADDR:MASTER_PORT " + where
                         + " within " + std::to_string(launch.timeoutSeconds) + " s (" + what
                         + "): is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same for every rank?");
    }
    // Check in: a rank twice, or fewer ranks than WORLD_SIZE, is named.
    const auto mine = m->store->add("rank/" + std::to_string(launch.rank), 1);
    if (mine > 1) {
        throw InputError("RANK " + std::to_string(launch.rank) + " was started twice for this rendezvous (" + where
                         + "): give every process its own RANK from 0 to WORLD_SIZE - 1");
    }
    {
        const std::string me = m->host + " " + std::to_string(getpid());
        m->store->set("pid/" + std::to_string(launch.rank), std::vector<std::uint8_t>(me.begin(), me.end()));
    }
    auto arrived = m->store->add("arrived", 1);
    const auto deadline = std::chrono::steady_clock::now() + m->timeout;
    while (arrived < launch.worldSize) {
        if (std::chrono::steady_clock::now() > deadline) {
            throw InputError("WORLD_SIZE is " + std::to_string(launch.worldSize) + " but only " + std::to_string(arrived)
                             + " process(es) arrived at " + where + " within " + std::to_string(launch.timeoutSeconds)
                             + " s: start WORLD_SIZE processes, or set WORLD_SIZE to the number you start");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        arrived = m->store->add("arrived", 0);
    }
    for (int r = 0; r < launch.worldSize; ++r) {
        const auto bytes = m->store->get("pid/" + std::to_string(r));
        std::istringstream in(std::string(bytes.begin(), bytes.end()));
        std::string host;
        long pid = 0;
        in >> host >> pid;
        m->peers.emplace_back(host, pid);
    }
    auto options = c10d::ProcessGroupGloo::Options::create(m->timeout);
    if (!launch.socketInterface.empty()) {
        // C++ Gloo ignores GLOO_SOCKET_IFNAME; honour it here.
        try {
            options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(launch.socketInterface));
        } catch (const std::exception& e) {
            throw InputError("GLOO_SOCKET_IFNAME is \"" + launch.socketInterface + "\", which Gloo cannot use here ("
                             + firstLine(e.what()) + ")");
        }
    } else {
        // The interface that reaches the other machines: towards a peer on
        // another host when there is one (on rank 0's machine MASTER_ADDR may
        // resolve to a loopback address, which other hosts cannot reach).
        std::string towards = launch.masterAddr;
        for (const auto& [host, pid] : m->peers) {
            if (host != m->host) {
                towards = host;
                break;
            }
        }
        options->devices.push_back(
            c10d::ProcessGroupGloo::createDeviceForHostname(localAddressTowards(towards, launch.masterPort)));
    }
    options->threads = 2;
    try {
        m->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
            c10::make_intrusive<c10d::PrefixStore>("gloo", m->store), launch.rank, launch.worldSize, options);
    } catch (const std::exception& e) {
        throw RunError(explain("connecting the ranks' Gloo group failed: " + firstLine(e.what())));
    }
#ifdef USE_C10D_NCCL
    if (cudaRun) {
        // NCCL for the CUDA tensors (gradients, weights): no copy through the
        // host, and bf16 sums. Its communicators connect at the first collective.
        auto ncclOptions = c10d::ProcessGroupNCCL::Options::create();
        ncclOptions->timeout = m->timeout;
        try {
            m->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
                c10::make_intrusive<c10d::PrefixStore>("nccl", m->store), launch.rank, launch.worldSize, ncclOptions);
        } catch (const std::exception& e) {
            throw RunError(explain("creating the ranks' NCCL group failed: " + firstLine(e.what())));
        }
    }
#else
    (void)cudaRun;
#endif
}

bool DistGroup::ncclBuilt()
{
#ifdef USE_C10D_NCCL
    return true;
#else
    return false;
#endif
}

std::string DistGroup::backendFor(bool cudaTensor) const
{
    return m->backendFor(cudaTensor) == m->gloo.get() ? "gloo" : "nccl";
}

std::string DistGroup::backendFor(const at::Tensor& tensor) const { return backendFor(tensor.is_cuda()); }

std::chrono::milliseconds DistGroup::ncclTimeout() const
{
#ifdef USE_C10D_NCCL
    if (m->nccl) return m->nccl->getOptions()->timeout;
#endif
    return std::chrono::milliseconds(0);
}

DistGroup::~DistGroup() = default;

int DistGroup::rank() const { return m->launch.rank; }
int DistGroup::size() const { return m->launch.worldSize; }
const DistLaunch& DistGroup::launch() const { return m->launch; }

void DistGroup::broadcastFromRankZero(const std::vector<at::Tensor>& tensors)
{
    for (const auto& t : tensors) {
        // Gloo broadcasts no bfloat16 ("Invalid scalar type"; a LoRA base
        // kept in bf16): its bytes go as fp16's, the same size, unchanged.
        std::vector<at::Tensor> one{t.scalar_type() == at::kBFloat16 && !t.is_cuda() ? t.view(at::kHalf) : t};
        c10d::BroadcastOptions o;
        o.rootRank = 0;
        m->backendFor(t.is_cuda())->broadcast(one, o)->wait(m->timeout);
    }
}

void DistGroup::allreduce(at::Tensor& tensor, Reduce op)
{
    std::vector<at::Tensor> one{tensor};
    c10d::AllreduceOptions o;
    o.reduceOp = op == Reduce::Sum ? c10d::ReduceOp::SUM : op == Reduce::Max ? c10d::ReduceOp::MAX : c10d::ReduceOp::MIN;
    m->backendFor(tensor.is_cuda())->allreduce(one, o)->wait(m->timeout);
}

void DistGroup::startSum(at::Tensor& tensor)
{
    std::vector<at::Tensor> one{tensor};
    m->started.push_back(m->backendFor(tensor.is_cuda())->allreduce(one));
}

double DistGroup::waitStarted()
{
    const auto from = std::chrono::steady_clock::now();
    auto works = std::move(m->started);
    m->started.clear();
    for (auto& w : works) w->wait(m->timeout);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
}

void DistGroup::publish(const std::string& key, const std::string& value)
{
    m->store->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::string DistGroup::fetch(const std::string& key)
{
    const auto bytes = m->store->get(key);
    return std::string(bytes.begin(), bytes.end());
}

void DistGroup::setRunFolder(const std::string& folder) { m->runFolder = folder; }

void DistGroup::endTogether()
{
    if (m->launch.rank == 0) {
        publish("done", "1");
        return;
    }
    try {
        m->store->wait({"done"}, m->timeout);
    } catch (const std::exception&) {
        // Rank 0 is gone or slow: this rank has nothing left to wait for.
    }
}

bool DistGroup::looksLikeCollectiveFailure(const std::string& error)
{
    for (const char* mark : {"gloo", "Gloo", "NCCL", "nccl", "Connection", "connection", "timed out", "Timed out", "Timeout", "timeout",
                             "Socket", "socket", "peer"}) {
        if (error.find(mark) != std::string::npos) return true;
    }
    return false;
}
std::string DistGroup::explain(const std::string& error) const
{
    // A rank killed mid-step closes its sockets before it is gone from the
    // process table: give it a moment to be seen as exited.
    std::vector<std::string> gone;
    for (int attempt = 0; attempt < 20 && gone.empty(); ++attempt) {
        if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        for (std::size_t r = 0; r < m->peers.size(); ++r) {
            if (static_cast<int>(r) == m->launch.rank || m->peers[r].first != m->host) continue;
            const char state = processState(m->peers[r].second);
            if (state == 'X' || state == 'Z' || state == 'T' || state == 't') {
                std::string text = "rank " + std::to_string(r) + " (pid " + std::to_string(m->peers[r].second) + ")"
                    + (state == 'T' || state == 't' ? " is stopped" : " exited");
                if (!m->runFolder.empty()) {
                    const auto last = lastLineOf((std::filesystem::path(m->runFolder) / ("rank-" + std::to_string(r) + ".log")).string());
                    text += last.empty() ? "; it wrote nothing" : "; its last message: \"" + last + "\"";
                }
                gone.push_back(text);
            }
        }
    }
    std::string out = "data-parallel run failed on rank " + std::to_string(m->launch.rank) + " of " + std::to_string(m->launch.worldSize);
    if (!gone.empty()) {
        out += ": ";
        for (std::size_t i = 0; i < gone.size(); ++i) out += (i ? "; " : "") + gone[i];
        out += " (" + firstLine(error) + ")";
    } else {
        out += ": " + firstLine(error);
    }
    return out;
}

} // namespace tb
