// trainbench-cli slurm: write (and optionally submit) the sbatch script of a
// data-parallel run on a Slurm cluster.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "Command.h"
#include "StoreAccess.h"
#include "common/Errors.h"
#include "config/ByteSizes.h"
#include "config/RunConfig.h"
#include "dist/SlurmScript.h"
#include "store/RunStore.h"
#include "tune/Sweep.h"

namespace tb::cli {
namespace {

std::string thisProgram()
{
    char exe[4096] = {0};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    return n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string("trainbench-cli");
}

// sbatch --parsable FILE: the job id, or an InputError with sbatch's own words.
std::string submit(const std::string& script)
{
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("cannot create a pipe for sbatch");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("cannot start sbatch (fork failed)");
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(out[1], 2);
        close(out[0]);
        close(out[1]);
        execlp("sbatch", "sbatch", "--parsable", script.c_str(), static_cast<char*>(nullptr));
        std::fprintf(stderr, "exec failed\n");
        _exit(127);
    }
    close(out[1]);
    std::string text;
    char buffer[512];
    for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        text.append(buffer, static_cast<std::size_t>(n));
    }
    close(out[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!WIFEXITED(status) || WEXITSTATUS(status) == 127) {
        throw InputError("sbatch is not available here (install slurm-client, or copy " + script
                         + " to a login node of the cluster and run 'sbatch " + script + "' there)");
    }
    if (WEXITSTATUS(status) != 0) throw InputError("sbatch refused the job: " + text);
    // --parsable: "ID" or "ID;cluster"
    return text.substr(0, text.find(';'));
}

int slurm(const Args& args)
{
    if (!args.positionals().empty()) throw InputError("'slurm' takes no positional arguments, got \"" + args.positionals()[0] + "\"");
    const auto path = args.value("--config");
    if (!path || *path == "-") throw InputError("'slurm' needs --config FILE (every rank reads it, so not '-')");
    namespace fs = std::filesystem;
    const RunConfig config = loadConfigFile(*path); // refuse a bad config here, not on the cluster
    SlurmJob job;
    job.name = config.name;
    job.configPath = fs::absolute(*path).lexically_normal().string();
    job.cliPath = args.value("--cli").value_or(thisProgram());
    job.nodes = static_cast<int>(args.integer("--nodes", 1, 100000).value_or(1));
    job.gpusPerNode = static_cast<int>(args.integer("--gpus-per-node", 1, 64).value_or(0));
    job.tasksPerNode = static_cast<int>(args.integer("--tasks-per-node", 1, 1024).value_or(0));
    job.partition = args.value("--partition").value_or("");
    job.time = args.value("--time").value_or("");
    job.account = args.value("--account").value_or("");
    const std::string folder = args.value("--output").value_or("trainbench-slurm");
    job.folder = fs::absolute(folder).lexically_normal().string();
    if (auto db = args.value("--db")) job.dbPath = fs::absolute(*db).lexically_normal().string();
    if (!args.value("--nodes")) throw InputError("'slurm' needs --nodes N (and --gpus-per-node or --tasks-per-node)");
    std::optional<SweepRecord> sweep;
    if (auto sweepFile = args.value("--sweep")) {
        // The sweep goes into the shared store now; each array task runs one of its trials.
        std::ifstream in(*sweepFile, std::ios::binary);
        if (!in) throw InputError("sweep file not found: " + *sweepFile);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        SweepRecord r = newSweepRecord(text, parseSweep(text, *sweepFile), config);
        if (auto b = args.value("--budget")) r.budgetBytes = budgetBytes(*b);
        sweep = std::move(r);
        job.sweepId = 1; // checked below with the real id
        job.sweepTrials = static_cast<int>(sweep->trials.size());
        job.arrayParallel = static_cast<int>(args.integer("--parallel", 1, 100000).value_or(0));
        job.name = sweep->name;
    } else if (args.value("--budget") || args.value("--parallel")) {
        throw InputError("--budget and --parallel are for a sweep: give --sweep FILE");
    }
    (void)slurmScript(job); // refuse bad arguments before the sweep is stored
    if (sweep) {
        std::error_code made;
        fs::create_directories(job.folder, made);
        const std::string db = job.dbPath.empty() ? job.folder + "/experiments.db" : job.dbPath;
        RunStore store(db);
        job.sweepId = store.createSweep(*sweep);
        std::cout << "sweep " << job.sweepId << ": " << job.sweepTrials << " trials of \"" << sweep->name << "\" in " << db << "\n";
    }
    const std::string script = slurmScript(job);
    std::error_code ec;
    fs::create_directories(job.folder, ec);
    if (ec) throw InputError("cannot create the folder " + job.folder + " (" + ec.message() + "); give --output DIR on a shared file system");
    const std::string file = job.folder + "/" + slurmJobName(job.name) + ".sbatch";
    {
        std::ofstream out(file, std::ios::trunc);
        out << script;
        if (!out) throw InputError("cannot write " + file);
    }
    fs::permissions(file, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add, ec);
    if (job.sweepId > 0) {
        std::cout << "wrote " << file << " (a job array of " << job.sweepTrials << " trial(s); store, checkpoints and output in "
                  << job.folder << ")\n";
    } else {
        std::cout << "wrote " << file << " (" << job.nodes * (job.gpusPerNode > 0 ? job.gpusPerNode : job.tasksPerNode)
                  << " rank(s); store, checkpoints and output in " << job.folder << ")\n";
    }
    if (!args.flag("--submit")) {
        std::cout << "submit it with: sbatch " << file << "\n";
        return kExitOk;
    }
    const auto id = submit(file);
    std::cout << "submitted job " << id << "\nits output: " << job.folder << "/slurm-" << id << (job.sweepId > 0 ? "_N" : "") << ".out\n";
    if (job.sweepId > 0) std::cout << "see the sweep with: trainbench-cli sweep --status " << job.sweepId << " --db " << (job.dbPath.empty() ? job.folder + "/experiments.db" : job.dbPath) << "\n";
    return kExitOk;
}

const CommandRegistration slurmRegistration{Command{
    "slurm",
    "Write the sbatch script of a data-parallel run on a Slurm cluster (and submit it with --submit).",
    "--config FILE --nodes N (--gpus-per-node G | --tasks-per-node T) [--partition P] [--time T] [--account A] "
    "[--output DIR] [--db FILE] [--sweep FILE [--budget BYTES] [--parallel N]] [--submit]",
    {{"--config", true, "the experiment config (JSON); every rank reads it", "FILE"},
     {"--nodes", true, "nodes to run on", "N"},
     {"--gpus-per-node", true, "GPUs per node: one rank (task) per GPU", "G"},
     {"--tasks-per-node", true, "ranks per node on CPU nodes", "T"},
     {"--partition", true, "the Slurm partition", "P"},
     {"--time", true, "the time limit (minutes, H:MM:SS or D-HH:MM:SS); 120 s before it the run checkpoints and requeues", "T"},
     {"--account", true, "the Slurm account to charge", "A"},
     {"--output", true, "a folder every node sees: the script, the store, checkpoints and output (default ./trainbench-slurm)", "DIR"},
     {"--db", true, "the experiment database (default DIR/experiments.db)", "FILE"},
     {"--cli", true, "trainbench-cli's path on the nodes (default: this program's)", "PATH"},
     {"--submit", false, "submit the script with sbatch and print the job id"},
     {"--sweep", true, "a sweep instead of one run: a job array of its trials, each planned first (docs/sweeps.md)", "FILE"},
     {"--budget", true, "with --sweep: skip trials whose plan does not fit this memory (bytes or \"4 GiB\")", "BYTES"},
     {"--parallel", true, "with --sweep: at most N array tasks at a time", "N"}},
    &slurm}};

} // namespace
} // namespace tb::cli
