#pragma once
// qcustomplot.h uses the Qt keywords signals/slots/emit/foreach, which this
// project turns off (QT_NO_KEYWORDS: LibTorch declares functions named slots).
// Map them to the Q_ macros for this one header only.
#define signals Q_SIGNALS
#define slots Q_SLOTS
#define emit Q_EMIT
#define foreach Q_FOREACH
#include <qcustomplot.h>
#undef signals
#undef slots
#undef emit
#undef foreach
