// The History table's columns: config fields added from the header's menu
// (kept across sessions), built-in columns hidden and shown again, and the ID
// column pinned at the left when the table scrolls sideways.
#include "HistoryPanel.h"

#include <QAction>
#include <QEvent>
#include <QHeaderView>
#include <QMenu>
#include <QScrollBar>
#include <QSettings>
#include <QSortFilterProxyModel>
#include <QTableView>

#include <algorithm>

#include "config/RunConfig.h"

namespace tb::ui {

void HistoryPanel::setUpColumns()
{
    // Right-click on the header: config fields as columns, hide or show columns.
    m_table->horizontalHeader()->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_table->horizontalHeader(), &QHeaderView::customContextMenuRequested, this, [this](const QPoint& pos) {
        auto menu = headerMenu(m_table->horizontalHeader()->logicalIndexAt(pos));
        menu->exec(m_table->horizontalHeader()->mapToGlobal(pos));
    });
    // The ID column stays in view when the table scrolls sideways: a second
    // view over the same model and selection shows it pinned at the left.
    m_frozen = new QTableView(m_table);
    m_frozen->setObjectName("historyFrozenId");
    m_frozen->setModel(m_proxy);
    m_frozen->setSelectionModel(m_table->selectionModel());
    m_frozen->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_frozen->setSelectionMode(QAbstractItemView::ExtendedSelection);
    m_frozen->setFocusPolicy(Qt::NoFocus);
    m_frozen->verticalHeader()->hide();
    m_frozen->verticalHeader()->setDefaultSectionSize(m_table->verticalHeader()->defaultSectionSize());
    m_frozen->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    m_frozen->horizontalHeader()->setSortIndicatorShown(true);
    m_frozen->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_frozen->setAlternatingRowColors(true);
    m_frozen->setStyleSheet("QTableView { border: none; }");
    m_frozen->horizontalHeader()->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_frozen->horizontalHeader(), &QHeaderView::customContextMenuRequested, this, [this](const QPoint& pos) {
        headerMenu(RunTableModel::Id)->exec(m_frozen->horizontalHeader()->mapToGlobal(pos));
    });
    m_table->viewport()->stackUnder(m_frozen);
    m_table->installEventFilter(this);
    connect(m_frozen->verticalScrollBar(), &QAbstractSlider::valueChanged, m_table->verticalScrollBar(), &QAbstractSlider::setValue);
    connect(m_table->verticalScrollBar(), &QAbstractSlider::valueChanged, m_frozen->verticalScrollBar(), &QAbstractSlider::setValue);
    connect(m_table->horizontalHeader(), &QHeaderView::sectionResized, this, [this](int section, int, int size) {
        if (section != RunTableModel::Id) return;
        m_frozen->setColumnWidth(RunTableModel::Id, size);
        placeFrozenIdView();
    });
    connect(m_table->horizontalHeader(), &QHeaderView::sortIndicatorChanged, this, [this](int section, Qt::SortOrder order) {
        m_frozen->horizontalHeader()->setSortIndicator(section, order);
    });
    connect(m_frozen->horizontalHeader(), &QHeaderView::sectionClicked, this, [this](int section) {
        const auto* header = m_table->horizontalHeader();
        const bool same = header->sortIndicatorSection() == section;
        m_table->sortByColumn(section, same && header->sortIndicatorOrder() == Qt::AscendingOrder ? Qt::DescendingOrder
                                                                                                   : Qt::AscendingOrder);
    });
    const auto hideAllButId = [this] {
        for (int c = 0; c < m_proxy->columnCount(); ++c) m_frozen->setColumnHidden(c, c != RunTableModel::Id);
        m_frozen->setColumnWidth(RunTableModel::Id, m_table->columnWidth(RunTableModel::Id));
        placeFrozenIdView();
    };
    connect(m_model, &QAbstractItemModel::modelReset, this, hideAllButId);
    connect(m_model, &QAbstractItemModel::columnsInserted, this, hideAllButId);
    hideAllButId();
}

void HistoryPanel::placeFrozenIdView()
{
    if (!m_frozen) return;
    const int frame = m_table->frameWidth();
    m_frozen->setGeometry(frame, frame, m_table->columnWidth(RunTableModel::Id),
                          m_table->viewport()->height() + m_table->horizontalHeader()->height());
    m_frozen->horizontalHeader()->setFixedHeight(m_table->horizontalHeader()->height());
}

bool HistoryPanel::eventFilter(QObject* watched, QEvent* event)
{
    if (watched == m_table && (event->type() == QEvent::Resize || event->type() == QEvent::Show)) placeFrozenIdView();
    return QWidget::eventFilter(watched, event);
}

void HistoryPanel::setConfigColumns(const std::vector<std::string>& paths)
{
    m_model->setConfigColumns(paths);
    QStringList list;
    for (const auto& p : paths) list << QString::fromStdString(p);
    QSettings().setValue("history/configColumns", list);
    m_table->resizeColumnsToContents();
    placeFrozenIdView();
}

std::unique_ptr<QMenu> HistoryPanel::headerMenu(int column)
{
    auto menu = std::make_unique<QMenu>(this);
    const std::string clicked = column >= 0 ? m_model->configPathOf(column) : std::string();
    if (!clicked.empty()) {
        menu->addAction(tr("Remove column %1").arg(QString::fromStdString(clicked)), this, [this, clicked] {
            auto paths = m_model->configColumns();
            paths.erase(std::remove(paths.begin(), paths.end(), clicked), paths.end());
            setConfigColumns(paths);
        });
    } else if (column > RunTableModel::Name && column < RunTableModel::kColumns) {
        const QString name = m_model->headerData(column, Qt::Horizontal, Qt::DisplayRole).toString();
        menu->addAction(tr("Hide column %1").arg(name), this, [this, column] { m_table->setColumnHidden(column, true); });
    }
    bool hidden = false;
    for (int c = 0; c < RunTableModel::kColumns; ++c) hidden = hidden || m_table->isColumnHidden(c);
    if (hidden) {
        menu->addAction(tr("Show all columns"), this, [this] {
            for (int c = 0; c < RunTableModel::kColumns; ++c) m_table->setColumnHidden(c, false);
        });
    }
    if (!menu->isEmpty()) menu->addSeparator();
    // Every field a config can set, grouped by its section; checked when shown.
    QMenu* add = menu->addMenu(tr("Config columns"));
    add->setObjectName("historyConfigColumns");
    std::map<QString, QMenu*> sections;
    const auto& shown = m_model->configColumns();
    for (const auto& path : configFieldPaths()) {
        const QString text = QString::fromStdString(path);
        const QString section = text.contains('.') ? text.section('.', 0, 0) : tr("top level");
        QMenu*& sub = sections[section];
        if (!sub) sub = add->addMenu(section);
        QAction* action = sub->addAction(text);
        action->setCheckable(true);
        action->setChecked(std::find(shown.begin(), shown.end(), path) != shown.end());
        connect(action, &QAction::toggled, this, [this, path](bool on) {
            auto paths = m_model->configColumns();
            paths.erase(std::remove(paths.begin(), paths.end(), path), paths.end());
            if (on) paths.push_back(path);
            setConfigColumns(paths);
        });
    }
    return menu;
}

} // namespace tb::ui
