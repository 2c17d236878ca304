#pragma once
// Generate from the model a run just trained: prompt, temperature, Generate.
// Generation runs off the GUI thread; the answer is shown as plain text.

#include <QGroupBox>

#include <memory>

#include "config/RunConfig.h"

class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace tb::ui {

class SampleBox final : public QGroupBox {
    Q_OBJECT

public:
    explicit SampleBox(QWidget* parent = nullptr);
    ~SampleBox() override;

    // The model to sample from: a run's config and one of its checkpoints.
    void setModel(const RunConfig& config, const QString& checkpoint, qint64 runId);
    void generate();

    QLineEdit* promptEdit() const { return m_prompt; }
    QDoubleSpinBox* temperatureBox() const { return m_temperature; }
    QPushButton* generateButton() const { return m_generate; }
    QLabel* resultLabel() const { return m_result; }

Q_SIGNALS:
    void generated(const QString& completion);

private:
    void showResult(const QString& text, bool error);

    struct Job;
    std::shared_ptr<Job> m_job; // the generation in flight, if any
    RunConfig m_config;
    QString m_checkpoint;
    qint64 m_runId = 0;
    quint64 m_generation = 0; // bumped when the run changes: a late result of the previous run is dropped
    QLineEdit* m_prompt;
    QDoubleSpinBox* m_temperature;
    QPushButton* m_generate;
    QLabel* m_result;
};

} // namespace tb::ui
