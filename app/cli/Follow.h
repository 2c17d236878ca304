#pragma once
// Following a run as it trains: from the local store (read through WAL from
// another process), or from a remote one over ssh, reconnecting after a
// dropped link without repeating or skipping a point.

#include <cstdint>
#include <string>

#include "remote/HostBook.h"

namespace tb::cli {

struct FollowOptions {
    int fromStep = 0;         // the first step whose metrics are printed
    std::int64_t eventsAfter = -1; // events stored after this event id
    bool jsonl = false;       // one JSON object per line instead of text
    int pollMs = 200;         // how often the local store is read
    int giveUpAfterS = 600;   // a link down this long ends a remote follow
};

// Both print until the run ends and return the exit status of its end:
// 0 finished, 130 cancelled, 1 failed or interrupted.
int followLocal(const std::string& dbOption, std::int64_t runId, const FollowOptions& options);
int followRemote(const remote::Host& host, std::int64_t runId, const FollowOptions& options);

} // namespace tb::cli
