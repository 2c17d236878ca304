#pragma once

#include <memory>
#include <string>

#include "store/RunStore.h"

namespace tb::cli {

// Opens the store named by --db (or the default) for reading commands; a
// missing file is an error that says where it looked, not a new empty database.
std::unique_ptr<RunStore> openExistingStore(const std::string& dbOption);

} // namespace tb::cli
