#pragma once
// Tune…: the fastest configuration of the experiment that fits, found by
// `trainbench-cli tune` (run as a process, so measuring real steps never
// blocks the window and Stop ends it at once). For the planner's target card
// it plans and ranks; for this computer it also measures the best few. The
// table shows every candidate that fits with its planned peak, share of the
// budget and predicted and measured tokens per second; Apply writes the
// winner into the experiment and says what changed.

#include <QDialog>
#include <QJsonObject>

#include "gpu/Catalogue.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QProcess;
class QPushButton;
class QSpinBox;
class QTableWidget;
class QTemporaryFile;

namespace tb::ui {

class ConfigDocument;

class TuneDialog final : public QDialog {
    Q_OBJECT

public:
    TuneDialog(ConfigDocument* document, const GpuTarget& card, QWidget* parent = nullptr);
    ~TuneDialog() override; // stops a tune in progress
    // The planner's target card changed: the next tune plans for it.
    void setCard(const GpuTarget& card);

    // For tests and the status bar.
    QComboBox* targetBox() const { return m_target; }
    QDoubleSpinBox* budgetBox() const { return m_budget; }
    QSpinBox* measureStepsBox() const { return m_steps; }
    QCheckBox* keepEffectiveBox() const { return m_keepEffective; }
    QPushButton* tuneButton() const { return m_tune; }
    QPushButton* applyButton() const { return m_apply; }
    QTableWidget* table() const { return m_table; }
    QString statusText() const;
    QString resultText() const;
    bool running() const { return m_process != nullptr; }
    // The arguments `tune` is run with (after the config's path).
    QStringList tuneArguments() const;

public Q_SLOTS:
    void startOrStop();
    // Writes the winner into the experiment; returns the sentence `applied` carries.
    QString applyWinner();

Q_SIGNALS:
    void applied(const QString& message);
    void finished(); // a tune ended (done, failed or stopped)

private:
    void targetChanged();
    void showResult(const QJsonObject& result);
    void setStatus(const QString& text, bool error = false);

    ConfigDocument* m_document;
    GpuTarget m_card;
    QComboBox* m_target;
    QDoubleSpinBox* m_budget;
    QSpinBox* m_steps;
    QSpinBox* m_top;
    QCheckBox* m_keepEffective;
    QPushButton* m_tune;
    QPushButton* m_apply;
    QLabel* m_status;
    QTableWidget* m_table;
    QLabel* m_result;
    QProcess* m_process = nullptr;
    QTemporaryFile* m_config = nullptr;
    QString m_error;
    bool m_stopped = false;
    QJsonObject m_winner; // the winning candidate, empty until a tune found one
};

} // namespace tb::ui
