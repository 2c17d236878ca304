#pragma once
// QCOMPARE printers for the core's enums, so failures show names, not numbers.
#include <QtTest>

#include "store/RunStore.h"
#include "train/Trainer.h"

namespace QTest {
template <>
inline char* toString(const tb::RunStatus& status)
{
    return qstrdup(tb::runStatusName(status).c_str());
}
template <>
inline char* toString(const tb::TrainResult::Status& status)
{
    switch (status) {
    case tb::TrainResult::Status::Finished: return qstrdup("finished");
    case tb::TrainResult::Status::Cancelled: return qstrdup("cancelled");
    case tb::TrainResult::Status::Failed: return qstrdup("failed");
    }
    return qstrdup("?");
}
} // namespace QTest
