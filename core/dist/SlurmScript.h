#pragma once
// The sbatch script of a data-parallel run on a Slurm cluster: one task per
// GPU (or the tasks asked for on CPU nodes), srun starting trainbench-cli on
// every task, the store and checkpoints in a shared folder, and preemption
// handled: --signal=USR1@120 makes every rank checkpoint at its next step,
// rank 0 requeues the job, and the requeued job resumes the same run
// (it finds it by the job id in the shared folder).
#include <cstdint>
#include <string>

namespace tb {

struct SlurmJob {
    std::string name;        // --job-name
    std::string configPath;  // absolute
    std::string cliPath;     // absolute path of trainbench-cli on the nodes
    std::string folder;      // shared: the store, checkpoints, job files, output
    std::string dbPath;      // default: folder/experiments.db
    int nodes = 1;
    int gpusPerNode = 0;     // > 0: one task per GPU
    int tasksPerNode = 0;    // CPU nodes: tasks (ranks) per node
    std::string partition, time, account;
    // A sweep (trainbench-cli sweep) as a job array: one array task per
    // trial, each running `sweep --resume ID --trial N`; at most
    // `arrayParallel` at a time (0: as Slurm schedules them).
    std::int64_t sweepId = 0;
    int sweepTrials = 0;
    int arrayParallel = 0;
};

// Throws InputError for values sbatch would refuse (names that would break
// the script's quoting, counts below 1, a time Slurm does not read).
std::string slurmScript(const SlurmJob& job);

// A config name as a job and file name: letters, digits, - _ . only.
std::string slurmJobName(const std::string& configName);

// The file rank 0 writes in the shared folder for a job: the run it trains,
// so that the requeued job resumes it ("FOLDER/job-ID.run").
std::string slurmRunFile(const std::string& folder, const std::string& jobId);

} // namespace tb
