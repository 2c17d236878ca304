#include "remote/Ssh.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/Errors.h"
#include "common/Files.h"
#include "common/Version.h"

namespace tb::remote {

std::string shellQuote(const std::string& text)
{
    if (!text.empty() && text.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,@%+")
                             == std::string::npos) {
        return text;
    }
    if (text.rfind("~/", 0) == 0) return "~/" + shellQuote(text.substr(2));
    std::string quoted = "'";
    for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
}

std::string remoteCommand(const std::vector<std::string>& args)
{
    std::string line;
    for (const auto& a : args) {
        if (!line.empty()) line += ' ';
        line += shellQuote(a);
    }
    return line;
}

std::vector<std::string> sshArgv(const Host& host, const std::string& command, const SshOptions& options)
{
    std::vector<std::string> argv{"ssh", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=" + options.hostKeyChecking,
                                  "-o", "ConnectTimeout=" + std::to_string(options.connectTimeoutS),
                                  "-o", "ServerAliveInterval=" + std::to_string(options.aliveIntervalS),
                                  "-o", "ServerAliveCountMax=3"};
    if (options.verbose) argv.push_back("-v");
    argv.insert(argv.end(), host.sshOptions.begin(), host.sshOptions.end());
    argv.push_back("--");
    argv.push_back(sshDestination(host.destination));
    argv.push_back(command);
    return argv;
}

namespace {

struct Child {
    pid_t pid = -1;
    int in = -1, out = -1, err = -1;
};

// `stdinFd` >= 0: ssh reads its stdin from that file instead of a pipe.
Child spawn(const std::vector<std::string>& argv, int stdinFd = -1)
{
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        throw std::runtime_error(std::string("cannot start ssh: ") + std::strerror(errno));
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("cannot start ssh: ") + std::strerror(errno));
    if (pid == 0) {
        dup2(stdinFd >= 0 ? stdinFd : in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        // Its own process group: a Ctrl-C meant for us reaches ssh only through us.
        setpgid(0, 0);
        execvp(args[0], args.data());
        const char message[] = "ssh: cannot run the ssh client (install openssh-client)\n";
        (void)!write(2, message, sizeof message - 1);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (stdinFd >= 0) {
        close(in[1]);
        in[1] = -1;
    }
    return {pid, in[1], out[0], err[0]};
}

int waitFor(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 255; // killed: the link is gone
}

// Feeds `input`, reads stdout and stderr until both close; `onOut` gets stdout's bytes.
void pump(Child& c, const std::string& input, const std::function<void(const char*, std::size_t)>& onOut, std::string& err,
          const std::atomic<bool>* cancel = nullptr)
{
    signal(SIGPIPE, SIG_IGN);
    std::size_t written = 0;
    if (input.empty()) {
        if (c.in >= 0) close(c.in);
        c.in = -1;
    } else {
        fcntl(c.in, F_SETFL, O_NONBLOCK);
    }
    char buffer[65536];
    while (c.out >= 0 || c.err >= 0) {
        pollfd fds[3];
        int n = 0;
        int outAt = -1, errAt = -1, inAt = -1;
        if (c.out >= 0) { fds[n] = {c.out, POLLIN, 0}; outAt = n++; }
        if (c.err >= 0) { fds[n] = {c.err, POLLIN, 0}; errAt = n++; }
        if (c.in >= 0) { fds[n] = {c.in, POLLOUT, 0}; inAt = n++; }
        if (cancel && cancel->load()) {
            // Its own process group (spawn): ssh and anything it started.
            kill(-c.pid, SIGTERM);
            kill(c.pid, SIGTERM);
            err += std::string("\n") + kSshCancelled + "\n";
            for (int* fd : {&c.out, &c.err}) {
                if (*fd >= 0) close(*fd);
                *fd = -1;
            }
            break;
        }
        const int ready = poll(fds, static_cast<nfds_t>(n), cancel ? 200 : -1);
        if (ready < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (ready == 0) continue;
        if (inAt >= 0 && fds[inAt].revents) {
            const auto k = write(c.in, input.data() + written, input.size() - written);
            if (k > 0) written += static_cast<std::size_t>(k);
            if (k < 0 && errno != EAGAIN && errno != EINTR) written = input.size();
            if (written >= input.size()) {
                close(c.in);
                c.in = -1;
            }
        }
        for (auto [at, fd] : {std::pair{outAt, &c.out}, std::pair{errAt, &c.err}}) {
            if (at < 0 || !fds[at].revents) continue;
            const auto k = read(*fd, buffer, sizeof buffer);
            if (k > 0) {
                if (fd == &c.out) onOut(buffer, static_cast<std::size_t>(k));
                else err.append(buffer, static_cast<std::size_t>(k));
            } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(*fd);
                *fd = -1;
            }
        }
    }
    if (c.in >= 0) close(c.in);
}

} // namespace

SshResult runSsh(const Host& host, const std::string& command, const std::string& input, const SshOptions& options)
{
    Child c = spawn(sshArgv(host, command, options));
    SshResult r;
    pump(c, input, [&](const char* data, std::size_t size) { r.out.append(data, size); }, r.err, options.cancel);
    r.exitCode = waitFor(c.pid);
    if (options.cancel && options.cancel->load()) r.exitCode = 255;
    return r;
}

SshResult runSshInto(const Host& host, const std::string& command, int fd, const SshOptions& options)
{
    Child c = spawn(sshArgv(host, command, options));
    SshResult r;
    int error = 0;
    pump(c, {}, [&](const char* data, std::size_t size) {
        if (error == 0) error = writeAll(fd, data, size);
    }, r.err);
    r.exitCode = waitFor(c.pid);
    if (error != 0 && r.exitCode == 0) {
        r.exitCode = 1;
        r.err += std::string("cannot write the fetched file here: ") + std::strerror(error) + "\n";
    }
    return r;
}

SshResult runSshFrom(const Host& host, const std::string& command, int inputFd, const SshOptions& options,
                     const std::function<void(int pid)>& onStart)
{
    Child c = spawn(sshArgv(host, command, options), inputFd);
    if (onStart) onStart(c.pid);
    SshResult r;
    pump(c, {}, [&](const char* data, std::size_t size) { r.out.append(data, size); }, r.err);
    r.exitCode = waitFor(c.pid);
    return r;
}

SshResult streamSsh(const Host& host, const std::string& command, const std::function<void(const std::string&)>& onLine,
                    const SshOptions& options, const std::function<void(int pid)>& onStart)
{
    Child c = spawn(sshArgv(host, command, options));
    if (onStart) onStart(c.pid);
    SshResult r;
    std::string pending;
    pump(c, {}, [&](const char* data, std::size_t size) {
        pending.append(data, size);
        std::size_t start = 0;
        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
            onLine(pending.substr(start, nl - start));
            start = nl + 1;
        }
        pending.erase(0, start);
    }, r.err);
    r.out = pending; // an unfinished last line: the link broke mid-line
    r.exitCode = waitFor(c.pid);
    return r;
}

std::string sshMessages(const std::string& sshStderr)
{
    std::istringstream in(sshStderr);
    std::string line, kept;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // Not what went wrong: verbose chatter, and the banner around a changed key.
        if (line.empty() || line.rfind("debug", 0) == 0 || line.rfind("OpenSSH_", 0) == 0 || line.front() == '@'
            || line.rfind("Authenticated to", 0) == 0 || line.rfind("Transferred:", 0) == 0
            || line.rfind("Bytes per second", 0) == 0 || line.find("Permanently added") != std::string::npos) {
            continue;
        }
        // The remote trainbench-cli's own prefix: the caller says where it came from.
        for (const char* prefix : {"trainbench-cli: error: ", "trainbench-cli: failed: "}) {
            if (line.rfind(prefix, 0) == 0) line = line.substr(std::strlen(prefix));
        }
        if (!kept.empty()) kept += "; ";
        kept += line;
    }
    return kept;
}

std::string serverHostKey(const std::string& sshStderr)
{
    const std::string tag = "Server host key: ";
    const auto at = sshStderr.find(tag);
    if (at == std::string::npos) return {};
    auto end = sshStderr.find('\n', at);
    std::string key = sshStderr.substr(at + tag.size(), end == std::string::npos ? std::string::npos : end - at - tag.size());
    if (!key.empty() && key.back() == '\r') key.pop_back();
    // "ssh-ed25519 SHA256:..." -> "ED25519 SHA256:..."
    if (key.rfind("ssh-", 0) == 0) key = key.substr(4);
    const auto space = key.find(' ');
    for (std::size_t i = 0; i < std::min(space, key.size()); ++i) key[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(key[i])));
    return key;
}

bool transientFailure(const SshResult& r)
{
    if (r.exitCode != 255) return false;
    for (const char* permanent : {"Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "Permission denied",
                                  "Too many authentication failures", "Could not resolve hostname", "cannot run the ssh client",
                                  kSshCancelled}) {
        if (r.err.find(permanent) != std::string::npos) return false;
    }
    return true;
}

std::string connectionFailure(const Host& host, const SshResult& r)
{
    const std::string said = sshMessages(r.err);
    const std::string where = host.label() == host.destination ? host.destination : host.label() + " (" + host.destination + ")";
    const auto has = [&](const char* text) { return r.err.find(text) != std::string::npos; };
    std::string sentence;
    if (r.exitCode == 255 && has(kSshCancelled)) {
        return "connecting to " + where + " was cancelled";
    } else if (r.exitCode == 127) {
        sentence = "trainbench-cli was not found on " + where + " (tried '" + host.remoteCli
            + "'): install Trainbench there, or give its path with --remote-cli";
    } else if (r.exitCode != 255) {
        return {};
    } else if (has("REMOTE HOST IDENTIFICATION HAS CHANGED") || has("Host key for")) {
        // ssh's banner says it at length; keep the line that names the old key.
        std::string offending;
        if (const auto at = r.err.find("Offending "); at != std::string::npos) {
            offending = r.err.substr(at, r.err.find('\n', at) - at);
        }
        return "the host key of " + where
            + " has changed since it was saved in known_hosts: if the server was reinstalled, remove the old key with "
              "'ssh-keygen -R HOST' and add the host again; otherwise do not connect, someone may be in between"
            + (offending.empty() ? std::string() : " (" + offending + ")");
    } else if (has("Host key verification failed") || has("No ED25519 host key is known") || has("host key is known for")) {
        sentence = "the host key of " + where + " is not known yet: check its fingerprint, then add the host with "
                   "'trainbench-cli hosts add NAME " + host.destination + " --accept-new-host-key' (or connect once with ssh)";
    } else if (has("Permission denied") || has("Too many authentication failures")) {
        sentence = where + " refused authentication: add your public key to ~/.ssh/authorized_keys there, load it into "
                           "ssh-agent, or name it with IdentityFile in ~/.ssh/config (passwords are not asked for)";
    } else if (has("Could not resolve hostname")) {
        // The host part: "me@" is the user's name, not what failed to resolve.
        const auto at = host.destination.rfind('@');
        const std::string name = at == std::string::npos ? host.destination : host.destination.substr(at + 1);
        sentence = "the name " + name + " does not resolve: check the host name or the alias in ~/.ssh/config";
    } else if (has("Connection refused")) {
        sentence = where + " refused the connection: check the port and that sshd runs there";
    } else if (has("No route to host") || has("Network is unreachable") || has("timed out") || has("Connection timed out")) {
        sentence = "no route to " + where + ": check the address, the network or VPN, and any firewall";
    } else if (has("Connection closed") || has("Broken pipe") || has("Connection reset") || has("Timeout, server")) {
        sentence = "the connection to " + where + " was lost";
    } else if (has("cannot run the ssh client")) {
        sentence = "the ssh client is not installed here: install openssh-client";
    } else {
        sentence = "ssh could not connect to " + where;
    }
    return sentence + (said.empty() ? "" : " (ssh said: " + said + ")");
}

std::string cliCommand(const Host& host, const std::vector<std::string>& args, bool onStore)
{
    std::vector<std::string> line{host.remoteCli};
    line.insert(line.end(), args.begin(), args.end());
    if (onStore && !host.remoteDb.empty()) {
        line.push_back("--db");
        line.push_back(host.remoteDb);
    }
    return remoteCommand(line);
}

SshResult runCli(const Host& host, const std::vector<std::string>& args, const std::string& input, bool onStore,
                 const SshOptions& options)
{
    auto r = runSsh(host, cliCommand(host, args, onStore), input, options);
    if (const auto failure = connectionFailure(host, r); !failure.empty()) throw InputError(failure);
    return r;
}

std::string checkRemoteVersion(const Host& host, const SshOptions& options, std::string* sshStderr)
{
    const auto r = runSsh(host, remoteCommand({host.remoteCli, "--version"}), {}, options);
    if (sshStderr) *sshStderr = r.err;
    if (const auto failure = connectionFailure(host, r); !failure.empty()) throw InputError(failure);
    const std::string line = r.out.substr(0, r.out.find('\n'));
    const std::string prefix = "trainbench-cli ";
    if (r.exitCode != 0 || line.rfind(prefix, 0) != 0) {
        throw InputError("'" + host.remoteCli + " --version' on " + host.label() + " did not answer as trainbench-cli ("
                         + (line.empty() ? sshMessages(r.err) : line) + "): check the path given with --remote-cli");
    }
    const std::string theirs = line.substr(prefix.size(), line.find(' ', prefix.size()) - prefix.size());
    if (theirs != kAppVersion) {
        throw InputError(host.label() + " has trainbench-cli " + theirs + " and this is " + kAppVersion
                         + ": install the same version on both machines (runs, stores and configs must agree)");
    }
    return line;
}

} // namespace tb::remote
