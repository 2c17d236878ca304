#pragma once
// QCOMPARE printers for the core's enums, so failures show names, not numbers.
#include <QtTest>

#include "store/RunStore.h"

namespace QTest {
template <>
inline char* toString(const tb::RunStatus& status)
{
    return qstrdup(tb::runStatusName(status).c_str());
}
} // namespace QTest
