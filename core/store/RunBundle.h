#pragma once
// A run as one JSON document, for copying runs between stores: what
// 'export-run' writes and 'import-run' and 'fetch' read. It holds the run's
// record, config, metrics, events and findings, and where the run came from.

#include <optional>
#include <string>
#include <vector>

#include "store/RunStore.h"

namespace tb {

struct RunBundle {
    RunRecord run;
    RunOrigin origin; // the run's own origin if it was copied, else this machine, store and id
    std::vector<MetricPoint> metrics;
    std::vector<EventRecord> events;
    std::vector<FindingSetRecord> findings;
    std::optional<ArtifactRecord> checkpoint; // the latest checkpoint there (path on that machine)
};

// The bundle of a stored run. InputError for an unknown run.
RunBundle bundleOf(RunStore& store, std::int64_t runId);
std::string bundleToJson(const RunBundle& bundle);
// InputError naming `sourceName` and what is wrong.
RunBundle bundleFromJson(const std::string& text, const std::string& sourceName);

} // namespace tb
