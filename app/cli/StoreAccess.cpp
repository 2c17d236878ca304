#include "StoreAccess.h"

#include <filesystem>

#include "common/Errors.h"

namespace tb::cli {

std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption)
{
    const std::string path = dbOption.empty() ? RunStore::defaultPath() : dbOption;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
        throw InputError("no experiment database at " + path + " yet; train a run first or point --db at one");
    }
    return std::make_unique<RunStore>(path);
}

} // namespace tb::cli
