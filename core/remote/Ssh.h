#pragma once
// The OpenSSH transport of remote runs: the user's own ssh, config, keys and
// agent, always in batch mode (never a prompt hidden in a background
// process), and one sentence for each way a connection fails.

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "remote/HostBook.h"

namespace tb::remote {

// 'text' for a POSIX shell; a leading "~/" stays expandable.
std::string shellQuote(const std::string& text);
// The remote command line: `args` quoted and joined (args[0] is the remote
// trainbench-cli, so "~/bin/trainbench-cli" works).
std::string remoteCommand(const std::vector<std::string>& args);

struct SshOptions {
    // StrictHostKeyChecking: "yes" (default) refuses an unknown key,
    // "accept-new" records it in known_hosts.
    std::string hostKeyChecking = "yes";
    bool verbose = false;    // -v: stderr names the server's host key
    int connectTimeoutS = 10;
    // A link that stops answering is dropped after about 3 x this.
    int aliveIntervalS = 5;
    // Set (from another thread) to stop: ssh is killed within a fifth of a
    // second and the call returns exit 255 with kSshCancelled in its stderr.
    const std::atomic<bool>* cancel = nullptr;
};

// The line a cancelled call's stderr ends with.
inline constexpr const char* kSshCancelled = "trainbench: cancelled";

// ssh's argv for running `command` on `host`.
std::vector<std::string> sshArgv(const Host& host, const std::string& command, const SshOptions& options = {});

struct SshResult {
    int exitCode = -1;   // ssh's status: the remote command's, or 255 when ssh itself failed
    std::string out, err;
};

// Runs `command` there and waits; `input` goes to its stdin (then EOF).
SshResult runSsh(const Host& host, const std::string& command, const std::string& input = {},
                 const SshOptions& options = {});

// Runs `command` there and writes its stdout to `fd` (a file being fetched).
SshResult runSshInto(const Host& host, const std::string& command, int fd, const SshOptions& options = {});

// Runs `command` there with its stdin read from `inputFd` (a file being sent).
// `onStart` gets the ssh client's pid.
SshResult runSshFrom(const Host& host, const std::string& command, int inputFd, const SshOptions& options = {},
                     const std::function<void(int pid)>& onStart = {});

// Runs `command` there and hands each line of its stdout to `onLine` as it
// arrives; returns when the command (or the link) ends. `onStart` gets the
// ssh client's pid.
SshResult streamSsh(const Host& host, const std::string& command, const std::function<void(const std::string&)>& onLine,
                    const SshOptions& options = {}, const std::function<void(int pid)>& onStart = {});

// Why a connection failed, in one sentence that says what to do, with what
// ssh said; empty when `result` is not a connection failure (ssh's 255) or a
// missing remote command (127).
std::string connectionFailure(const Host& host, const SshResult& result);
// Whether a failure may pass by itself (a lost or refused link, a timeout),
// so reconnecting makes sense; not for an unknown or changed host key, a
// refused login, a name that does not resolve, or a missing trainbench-cli.
bool transientFailure(const SshResult& result);
// The command line of the host's trainbench-cli: `args`, then (for a command
// on the store) --db with the host's store when one is set.
std::string cliCommand(const Host& host, const std::vector<std::string>& args, bool onStore = true);
// Runs the host's trainbench-cli and returns what it printed; a connection
// failure is an InputError with its sentence.
SshResult runCli(const Host& host, const std::vector<std::string>& args, const std::string& input = {}, bool onStore = true,
                 const SshOptions& options = {});
// Checks that the host's trainbench-cli runs and is this version; InputError
// naming both versions otherwise. Returns its --version line; `sshStderr`
// gets what ssh said (with options.verbose, the server's host key).
std::string checkRemoteVersion(const Host& host, const SshOptions& options = {}, std::string* sshStderr = nullptr);

// "ED25519 SHA256:..." from the stderr of a verbose (-v) connection; empty if absent.
std::string serverHostKey(const std::string& sshStderr);
// The lines of ssh's stderr that are not its debug output.
std::string sshMessages(const std::string& sshStderr);

} // namespace tb::remote
