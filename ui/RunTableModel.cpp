#include "RunTableModel.h"

#include <QColor>
#include <QDateTime>
#include <QFileInfo>
#include <QIcon>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLocale>
#include <QPainter>
#include <QPixmap>

#include <cmath>
#include <limits>

#include "common/Percent.h"
#include "common/Errors.h"
#include "config/ModelSpec.h"
#include "config/RunConfig.h"
#include "memory/Estimator.h"

namespace tb::ui {
namespace {

QIcon statusIcon(RunStatus status)
{
    static std::map<RunStatus, QIcon> cache;
    auto it = cache.find(status);
    if (it != cache.end()) return it->second;
    QColor c;
    switch (status) {
    case RunStatus::Finished: c = QColor(0x2e, 0x7d, 0x32); break;
    case RunStatus::Running: c = QColor(0x15, 0x65, 0xc0); break;
    case RunStatus::Failed: c = QColor(0xc6, 0x28, 0x28); break;
    case RunStatus::Cancelled: c = QColor(0xef, 0x8f, 0x00); break;
    case RunStatus::Interrupted: c = QColor(0x8e, 0x24, 0xaa); break;
    default: c = QColor(0x75, 0x75, 0x75);
    }
    QPixmap pixmap(12, 12);
    pixmap.fill(Qt::transparent);
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setBrush(c);
    painter.setPen(Qt::NoPen);
    painter.drawEllipse(1, 1, 10, 10);
    return cache[status] = QIcon(pixmap);
}

QString mib(std::optional<std::int64_t> bytes)
{
    return bytes ? QString::number(static_cast<double>(*bytes) / 1048576.0, 'f', 1) : QString();
}

} // namespace


void RunTableModel::setRuns(std::vector<RunRecord> runs)
{
    beginResetModel();
    m_runs = std::move(runs);
    m_derived.assign(m_runs.size(), std::nullopt);
    m_rowOf.clear();
    for (std::size_t i = 0; i < m_runs.size(); ++i) m_rowOf[m_runs[i].id] = i;
    m_shown = std::min<int>(kFetchBatch, static_cast<int>(m_runs.size()));
    endResetModel();
}

int RunTableModel::rowOf(std::int64_t id) const
{
    const auto it = m_rowOf.find(id);
    return it == m_rowOf.end() ? -1 : static_cast<int>(it->second);
}

const RunRecord* RunTableModel::find(std::int64_t id) const
{
    const int row = rowOf(id);
    return row < 0 ? nullptr : &m_runs[static_cast<std::size_t>(row)];
}

bool RunTableModel::canFetchMore(const QModelIndex& parent) const
{
    return !parent.isValid() && m_shown < static_cast<int>(m_runs.size());
}

void RunTableModel::fetchMore(const QModelIndex& parent)
{
    if (parent.isValid()) return;
    const int more = std::min<int>(kFetchBatch, static_cast<int>(m_runs.size()) - m_shown);
    if (more <= 0) return;
    beginInsertRows({}, m_shown, m_shown + more - 1);
    m_shown += more;
    endInsertRows();
}

const RunTableModel::Derived& RunTableModel::derived(int row) const
{
    auto& slot = m_derived[static_cast<std::size_t>(row)];
    if (!slot) {
        Derived d;
        try {
            const auto config = parseConfig(m_runs[static_cast<std::size_t>(row)].configJson, "stored config");
            if (!plannableModel(config)) {
                d.model = QString("torchscript · %1").arg(QFileInfo(QString::fromStdString(config.model.path)).fileName());
            } else {
                try {
                    d.parameters = parameterCount(config);
                } catch (const InputError& e) {
                    d.parameters = 0; // (its folder gone or unreadable: the model without its count)
                    d.whyNoCount = QString::fromStdString(e.what());
                }
                d.model = QString("%1 %2x%3 · %4")
                              .arg(QString::fromStdString(config.model.type))
                              .arg(config.model.nLayer)
                              .arg(config.model.dModel)
                              .arg(d.parameters == 0        ? tr("parameters unknown")
                                   : d.parameters >= 1000000 ? QString::number(static_cast<double>(d.parameters) / 1e6, 'f', 1) + "M"
                                                            : QString::number(static_cast<double>(d.parameters) / 1e3, 'f', 0) + "k");
            }
        } catch (const std::exception&) {
            d.model = tr("(unreadable config)");
        }
        d.worldSize = m_runs[static_cast<std::size_t>(row)].worldSize();
        d.config = QJsonDocument::fromJson(QByteArray::fromStdString(m_runs[static_cast<std::size_t>(row)].configJson)).object();
        slot = d;
    }
    return *slot;
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid() || index.row() >= m_shown) return {};
    const RunRecord& r = m_runs[static_cast<std::size_t>(index.row())];
    if (index.column() >= kColumns) {
        if (role == Qt::TextAlignmentRole) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
        if (role != Qt::DisplayRole && role != kSortRole) return {};
        return configValue(index.row(), configPathOf(index.column()), role == kSortRole);
    }
    const auto column = static_cast<Column>(index.column());
    const double duration = r.startedAt ? (r.endedAt.value_or(r.heartbeatAt.value_or(*r.startedAt)) - *r.startedAt) : 0.0;
    const std::optional<double> error = r.estimateError();
    if (role == Qt::DecorationRole && column == Status) return statusIcon(r.status);
    if (role == Qt::ForegroundRole && column == Error && error && *error < -0.10) return QColor(0xc6, 0x28, 0x28);
    if (role == Qt::TextAlignmentRole) {
        return column == Name || column == Status || column == Model || column == Device || column == Precision || column == Tags
                || column == Parent || column == Sweep
            ? QVariant(Qt::AlignLeft | Qt::AlignVCenter) : QVariant(Qt::AlignRight | Qt::AlignVCenter);
    }
    if (role == Qt::ToolTipRole && column == Name && !r.note.empty()) return QString::fromStdString(r.note);
    if (role == Qt::ToolTipRole && column == Model) {
        const auto n = derived(index.row()).parameters;
        const auto& why = derived(index.row()).whyNoCount;
        if (n > 0) return tr("%1 parameters").arg(QLocale().toString(n));
        return why.isEmpty() ? QVariant() : QVariant(tr("parameters unknown: %1").arg(why));
    }
    if (role != Qt::DisplayRole && role != kSortRole) return {};
    const bool sort = role == kSortRole;
    const auto number = [&](std::optional<double> v, int digits) -> QVariant {
        if (!v) return sort ? QVariant(std::numeric_limits<double>::infinity()) : QVariant(QString());
        return sort ? QVariant(*v) : QVariant(QString::number(*v, 'f', digits));
    };
    switch (column) {
    case Id: return sort ? QVariant(static_cast<qlonglong>(r.id)) : QVariant(QString::number(r.id));
    case Name: return QString::fromStdString(r.name);
    case Status:
        // A copy of a run on a host says where it runs.
        if (r.origin.runId != 0 && r.status == RunStatus::Running) {
            return QString("running on %1").arg(QString::fromStdString(r.origin.label));
        }
        return QString::fromStdString(runStatusName(r.status));
    case Started:
        if (sort) return r.startedAt.value_or(r.createdAt);
        return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.startedAt.value_or(r.createdAt))).toString("yyyy-MM-dd HH:mm");
    case Duration: {
        if (sort) return duration;
        const auto s = static_cast<qint64>(duration);
        return s >= 3600 ? QString("%1:%2:%3").arg(s / 3600).arg(s / 60 % 60, 2, 10, QChar('0')).arg(s % 60, 2, 10, QChar('0'))
                         : QString("%1:%2").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
    }
    case Steps: return sort ? QVariant(r.stepsDone) : QVariant(QString("%1/%2").arg(r.stepsDone).arg(r.stepsTotal));
    case Model: return sort ? QVariant(static_cast<qlonglong>(derived(index.row()).parameters)) : QVariant(derived(index.row()).model);
    case Loss: return number(r.finalLoss, 4);
    case ValLoss: return number(r.finalValLoss, 4);
    case BestValLoss: return number(r.bestValLoss, 4);
    case TokensPerSec: return number(r.tokensPerSecond, 0);
    case Parent:
        if (!r.parentRunId) return sort ? QVariant(qlonglong(0)) : QVariant(QString());
        return sort ? QVariant(static_cast<qlonglong>(*r.parentRunId)) : QVariant(QString("run %1").arg(*r.parentRunId));
    case Sweep:
        // "sweep 3, trial 2": the sweep:3 filter lists its runs.
        if (!r.sweepId) return sort ? QVariant(qlonglong(0)) : QVariant(QString());
        return sort ? QVariant(static_cast<qlonglong>(*r.sweepId * 100000 + r.sweepTrial))
                    : QVariant(tr("sweep %1, trial %2").arg(*r.sweepId).arg(r.sweepTrial + 1));
    case Measured:
        if (sort) return r.measuredPeakBytes ? static_cast<double>(*r.measuredPeakBytes) : -1.0;
        return mib(r.measuredPeakBytes);
    case Estimated:
        if (sort) return r.estimatedPeakBytes ? static_cast<double>(*r.estimatedPeakBytes) : -1.0;
        return mib(r.estimatedPeakBytes);
    case Error:
        if (sort) return error ? std::abs(*error) : -1.0;
        return error ? QString::fromStdString(signedPercentText(*error)) : QString();
    case Device: return QString::fromStdString(r.device);
    // Data parallel: the ranks that trained it (the stored train.world_size).
    case Processes: {
        const int n = derived(index.row()).worldSize;
        return sort ? QVariant(n) : QVariant(QString::number(n));
    }
    case Precision: return QString::fromStdString(r.precision);
    case Tags: {
        QStringList tags;
        for (const auto& t : r.tags) tags << QString::fromStdString(t);
        return tags.join(", ");
    }
    case kColumns: break;
    }
    return {};
}

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && section == Sweep) {
        return tr("The sweep and trial that trained the run; filter with sweep:N to see one sweep's runs");
    }
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole && section == Processes) {
        return tr("Processes that trained the run together (data-parallel ranks, train.world_size)");
    }
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
    if (section >= kColumns) return QString::fromStdString(configPathOf(section));
    static const char* const names[kColumns] = {"ID",       "Name",      "Status",        "Started",    "Duration",
                                                "Steps",    "Model",     "Loss",          "Val loss",   "Best val",
                                                "Tokens/s", "Peak MiB",  "Estimate MiB",  "Est. error", "Device",
                                                "Processes", "Precision", "Tags",     "Started from", "Sweep"};
    return tr(names[section]);
}

void RunTableModel::setConfigColumns(std::vector<std::string> paths)
{
    if (paths == m_configColumns) return;
    beginResetModel();
    m_configColumns = std::move(paths);
    endResetModel();
}

std::string RunTableModel::configPathOf(int column) const
{
    const int i = column - kColumns;
    return i >= 0 && i < static_cast<int>(m_configColumns.size()) ? m_configColumns[static_cast<std::size_t>(i)] : std::string();
}

QVariant RunTableModel::configValue(int row, const std::string& path, bool sort) const
{
    QJsonValue value = derived(row).config;
    for (const QString& key : QString::fromStdString(path).split('.')) value = value.toObject().value(key);
    if (value.isDouble()) return sort ? QVariant(value.toDouble()) : QVariant(QString::number(value.toDouble(), 'g', 8));
    if (value.isBool()) return value.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    if (value.isString()) return value.toString();
    if (value.isArray()) return QString::fromUtf8(QJsonDocument(value.toArray()).toJson(QJsonDocument::Compact));
    // Not in this run's config (an older run, another model): empty, sorted last.
    return sort ? QVariant(std::numeric_limits<double>::infinity()) : QVariant(QString());
}

} // namespace tb::ui
