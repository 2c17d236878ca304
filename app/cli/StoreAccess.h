#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "common/Errors.h"
#include "store/RunStore.h"

namespace tb::cli {

// Opens the store named by --db (or the default) for reading commands; a
// missing file is an error that says where it looked, not a new empty database.
inline std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption)
{
    const std::string path = dbOption.empty() ? RunStore::defaultPath() : dbOption;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw InputError("no experiment database at " + path + " yet; train a run first or point --db at one");
    }
    return std::make_unique<RunStore>(path);
}

} // namespace tb::cli
