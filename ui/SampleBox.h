#pragma once
// Generate from the model a run just trained: prompt, temperature, Generate.
// Generation runs off the GUI thread; the answer is shown as plain text in a
// box of a few lines that wraps anywhere and scrolls: a model without a
// tokenizer answers in ids, one line thousands of characters long, and a label
// sized to it once widened the window to 4264 px.

#include <QGroupBox>

#include <memory>

#include "config/RunConfig.h"

class QDoubleSpinBox;
class QPlainTextEdit;
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
    QPlainTextEdit* resultView() const { return m_result; }
    // Shows a generation's answer (or, with error, why there is none).
    void showResult(const QString& text, bool error);

Q_SIGNALS:
    void generated(const QString& completion);

private:
    struct Job;
    std::shared_ptr<Job> m_job; // the generation in flight, if any
    RunConfig m_config;
    QString m_checkpoint;
    qint64 m_runId = 0;
    quint64 m_generation = 0; // bumped when the run changes: a late result of the previous run is dropped
    QLineEdit* m_prompt;
    QDoubleSpinBox* m_temperature;
    QPushButton* m_generate;
    QPlainTextEdit* m_result;
};

} // namespace tb::ui
