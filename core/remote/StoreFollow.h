#pragma once
// Following a run in a store on this machine while another process trains it
// (read through SQLite's WAL): the records 'follow --jsonl' prints, each
// metric point and event exactly once. The CLI's 'follow' prints them; the
// window plots a run started by 'train --nproc' with them.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "remote/RemoteFollow.h"

namespace tb {
class RunStore;
}

namespace tb::remote {

struct StoreFollowOptions {
    int fromStep = 0;               // the first step whose metrics are handed on
    std::int64_t eventsAfter = -1;  // events stored after this event id
    int pollMs = 200;               // how often the store is read
};

// Hands on the run's records until it ends (returns its status name:
// finished, failed, cancelled, interrupted) or `stop` becomes true (returns
// ""). `afterPoll` runs after each read of the store. InputError when the run
// is not there or is deleted while followed.
std::string followStore(RunStore& store, std::int64_t runId, const StoreFollowOptions& options,
                        const std::function<void(const FollowRecord&)>& onRecord,
                        const std::function<void()>& afterPoll = {}, const std::atomic<bool>* stop = nullptr);

} // namespace tb::remote
