#pragma once
// The History panel's run table: one row per stored run, the built-in columns
// (id, name, status, losses, memory, ...) and any config fields the user adds
// as columns. Rows are fetched as they scroll into view.

#include <QAbstractTableModel>
#include <QJsonObject>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/RunStore.h"

namespace tb::ui {

class RunTableModel final : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { Id, Name, Status, Started, Duration, Steps, Model, Loss, ValLoss, BestValLoss, TokensPerSec,
                  Measured, Estimated, Error, Device, Processes, Precision, Tags, Parent, Sweep, kColumns };
    static constexpr int kSortRole = Qt::UserRole + 1;
    static constexpr int kFetchBatch = 500;

    explicit RunTableModel(QObject* parent = nullptr) : QAbstractTableModel(parent) {}
    void setRuns(std::vector<RunRecord> runs);
    const RunRecord& run(int row) const { return m_runs[static_cast<std::size_t>(row)]; }
    // The listed run with this id, or nullptr.
    const RunRecord* find(std::int64_t id) const;
    int rowOf(std::int64_t id) const; // -1 when not listed
    int totalRuns() const { return static_cast<int>(m_runs.size()); }

    int rowCount(const QModelIndex& parent = {}) const override { return parent.isValid() ? 0 : m_shown; }
    int columnCount(const QModelIndex& parent = {}) const override
    {
        return parent.isValid() ? 0 : kColumns + static_cast<int>(m_configColumns.size());
    }
    // Config fields shown as columns after the built-in ones ("optim.lr",
    // "train.batch_size"): each run's stored value, sorted as numbers where
    // they are numbers.
    void setConfigColumns(std::vector<std::string> paths);
    const std::vector<std::string>& configColumns() const { return m_configColumns; }
    // The config path of a column, "" for a built-in one.
    std::string configPathOf(int column) const;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
    bool canFetchMore(const QModelIndex& parent) const override;
    void fetchMore(const QModelIndex& parent) override;

private:
    struct Derived {
        QString model; // "gpt 2x128"
        qint64 parameters = 0;
        QString whyNoCount; // parameters 0: why they are not known (a folder gone or unreadable)
        int worldSize = 1; // data-parallel processes
        QJsonObject config; // the stored config, for config columns
    };
    QVariant configValue(int row, const std::string& path, bool sort) const;
    const Derived& derived(int row) const;
    std::map<std::int64_t, std::size_t> m_rowOf; // id -> index into m_runs
    std::vector<RunRecord> m_runs;
    mutable std::vector<std::optional<Derived>> m_derived;
    int m_shown = 0;
    std::vector<std::string> m_configColumns;
};

} // namespace tb::ui
