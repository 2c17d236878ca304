#pragma once
// The GPU the window plans for: one owner of the chosen target (the Hardware
// panel writes it; the planner, the Experiment panel's estimate and
// Diagnostics read it), so no panel keeps a copy that can disagree.

#include <QObject>

#include "gpu/Catalogue.h"

namespace tb::ui {

class GpuTargetModel final : public QObject {
    Q_OBJECT

public:
    explicit GpuTargetModel(QObject* parent = nullptr);

    // Until one is chosen: the catalogue's T4, the common free GPU.
    const GpuTarget& target() const { return m_target; }
    // Whether a target was chosen (the Hardware panel chooses one on start).
    bool chosen() const { return m_chosen; }
    void setTarget(const GpuTarget& target);

Q_SIGNALS:
    void changed();

private:
    GpuTarget m_target;
    bool m_chosen = false;
};

} // namespace tb::ui
