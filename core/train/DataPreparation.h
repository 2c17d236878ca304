#pragma once
// What preparing a run's data reports, without LibTorch (Trainer.h and the
// run session include it): tokenizing a corpus can take minutes.

#include <atomic>
#include <functional>
#include <string>

namespace tb {

struct DataPreparation {
    // severity "progress" (shown, not stored), "info" or "warning"; kind "tokenize".
    std::function<void(const std::string& severity, const std::string& kind, const std::string& message)> onEvent;
    const std::atomic<bool>* cancel = nullptr; // tokenizing stops with RunError when it turns true
    std::string tokenCacheRoot;                // empty: text::defaultTokenCacheRoot()
};

} // namespace tb
