#include "GpuTargetModel.h"

namespace tb::ui {

GpuTargetModel::GpuTargetModel(QObject* parent) : QObject(parent), m_target(GpuCatalogue::bundled().resolve("T4")) {}

void GpuTargetModel::setTarget(const GpuTarget& target)
{
    m_target = target;
    m_chosen = true;
    Q_EMIT changed();
}

} // namespace tb::ui
