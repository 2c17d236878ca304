#include "dist/SlurmScript.h"

#include <cctype>
#include <regex>
#include <sstream>

#include "common/Errors.h"

namespace tb {
namespace {

// Single-quoted for bash: safe for any path without a quote or newline.
std::string quoted(const std::string& what, const std::string& value)
{
    if (value.find_first_of("'\n\r") != std::string::npos) {
        throw InputError(what + " \"" + value + "\" contains a quote or a line break; rename it for a batch script");
    }
    return "'" + value + "'";
}

void plainValue(const std::string& option, const std::string& value)
{
    static const std::regex ok("[A-Za-z0-9_.,:+=@-]+");
    if (!std::regex_match(value, ok)) {
        throw InputError(option + " \"" + value + "\" is not a Slurm name (letters, digits and _ . , : + = @ - only)");
    }
}

} // namespace

std::string slurmJobName(const std::string& configName)
{
    std::string name = configName.empty() ? "trainbench" : configName;
    for (auto& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
    }
    if (name.find_first_not_of('.') == std::string::npos) name = "trainbench"; // ".", ".."
    return name;
}

std::string slurmRunFile(const std::string& folder, const std::string& jobId) { return folder + "/job-" + jobId + ".run"; }

std::string slurmScript(const SlurmJob& job)
{
    if (job.nodes < 1) throw InputError("--nodes must be at least 1");
    if ((job.gpusPerNode > 0) == (job.tasksPerNode > 0)) {
        throw InputError("give one of --gpus-per-node (one task per GPU) or --tasks-per-node (CPU nodes)");
    }
    static const std::regex time("([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}");
    if (!job.time.empty() && !std::regex_match(job.time, time)) {
        throw InputError("--time \"" + job.time + "\" is not a Slurm time: give minutes, H:MM:SS or D-HH:MM:SS");
    }
    // #SBATCH lines are not shell-quoted: a folder with a space or Slurm's
    // % patterns in it cannot be said there.
    if (job.folder.find_first_of(" \t%'\"\n") != std::string::npos) {
        throw InputError("--output \"" + job.folder + "\" has a space, a quote or a % in it, which an #SBATCH line cannot hold; "
                         "give a folder without them");
    }
    if (!job.partition.empty()) plainValue("--partition", job.partition);
    if (!job.account.empty()) plainValue("--account", job.account);
    const std::string name = slurmJobName(job.name);
    const int perNode = job.gpusPerNode > 0 ? job.gpusPerNode : job.tasksPerNode;
    const std::string db = job.dbPath.empty() ? job.folder + "/experiments.db" : job.dbPath;
    std::ostringstream s;
    if (job.sweepId > 0) {
        // A sweep: one array task per trial, one process each (a trial trains
        // on one node; its GPUs, if any, are the task's).
        if (job.nodes != 1 || perNode != 1) {
            throw InputError("a sweep's trials each run as one process: give --nodes 1 and --gpus-per-node 1 (or "
                             "--tasks-per-node 1 on CPU nodes)");
        }
        if (job.sweepTrials < 1) throw InputError("the sweep has no trials");
        s << "#!/bin/bash\n"
          << "# Written by trainbench-cli slurm. Sweep " << job.sweepId << ": " << job.sweepTrials
          << " trial(s) as a job array, one array task per trial.\n"
          << "# Each task plans its trial first (one that does not fit or does not run is skipped with the reason) and\n"
          << "# trains it into the store in a folder every node sees: " << job.folder << "\n"
          << "# A task that ends early (preempted, over its time) leaves its trial to\n"
          << "#   trainbench-cli sweep --resume " << job.sweepId << " --trial N --db " << db << "\n"
          << "#SBATCH --job-name=" << name << "\n"
          << "#SBATCH --array=1-" << job.sweepTrials << (job.arrayParallel > 0 ? "%" + std::to_string(job.arrayParallel) : "") << "\n"
          << "#SBATCH --nodes=1\n"
          << "#SBATCH --ntasks-per-node=1\n";
        if (job.gpusPerNode > 0) s << "#SBATCH --gpus-per-node=1\n";
        if (!job.partition.empty()) s << "#SBATCH --partition=" << job.partition << "\n";
        if (!job.account.empty()) s << "#SBATCH --account=" << job.account << "\n";
        if (!job.time.empty()) s << "#SBATCH --time=" << job.time << "\n";
        s << "#SBATCH --open-mode=append\n"
          << "#SBATCH --output=" << job.folder << "/slurm-%A_%a.out\n"
          << "set -u\n"
          << "cli=" << quoted("the trainbench-cli path", job.cliPath) << "\n"
          << "db=" << quoted("the store path", db) << "\n"
          << "echo \"trainbench: sweep " << job.sweepId << ", trial ${SLURM_ARRAY_TASK_ID}, job ${SLURM_ARRAY_JOB_ID}, on ${SLURM_JOB_NODELIST}\"\n"
          << "exec \"$cli\" sweep --resume " << job.sweepId << " --trial \"${SLURM_ARRAY_TASK_ID}\" --db \"$db\"\n";
        return s.str();
    }
    s << "#!/bin/bash\n"
      << "# Written by trainbench-cli slurm. Data-parallel training: " << job.nodes * perNode << " rank(s), "
      << perNode << " per node" << (job.gpusPerNode > 0 ? ", one per GPU" : "") << ".\n"
      << "# The store, checkpoints and output are in a folder every node sees: " << job.folder << "\n"
      << "# Preemption and the time limit: 120 s before the end Slurm sends SIGUSR1; every rank\n"
      << "# checkpoints at its next step, rank 0 requeues the job, and the requeued job resumes the same run.\n"
      << "#SBATCH --job-name=" << name << "\n"
      << "#SBATCH --nodes=" << job.nodes << "\n"
      << "#SBATCH --ntasks-per-node=" << perNode << "\n";
    if (job.gpusPerNode > 0) s << "#SBATCH --gpus-per-node=" << job.gpusPerNode << "\n";
    if (!job.partition.empty()) s << "#SBATCH --partition=" << job.partition << "\n";
    if (!job.account.empty()) s << "#SBATCH --account=" << job.account << "\n";
    if (!job.time.empty()) s << "#SBATCH --time=" << job.time << "\n";
    s << "#SBATCH --signal=USR1@120\n"
      << "#SBATCH --requeue\n"
      << "#SBATCH --open-mode=append\n"
      << "#SBATCH --output=" << job.folder << "/slurm-%j.out\n"
      << "set -u\n"
      << "cli=" << quoted("the trainbench-cli path", job.cliPath) << "\n"
      << "db=" << quoted("the store path", db) << "\n"
      << "run_file=" << quoted("the folder", job.folder) << "/job-${SLURM_JOB_ID}.run\n"
      << "echo \"trainbench: job ${SLURM_JOB_ID}, start ${SLURM_RESTART_COUNT:-0}, on ${SLURM_JOB_NODELIST}\"\n"
      << "if [[ -s $run_file ]]; then\n"
      << "  # Requeued: resume the run this job started, from its last checkpoint.\n"
      << "  exec srun --kill-on-bad-exit=1 \"$cli\" resume \"$(cat \"$run_file\")\" --db \"$db\" --quiet\n"
      << "fi\n"
      << "exec srun --kill-on-bad-exit=1 \"$cli\" train --config " << quoted("the config path", job.configPath)
      << " --db \"$db\" --run-id-file \"$run_file\" --quiet\n";
    return s.str();
}

} // namespace tb
