#pragma once
// The memory planner: pick a model (the current experiment, a published
// preset or an imported config.json) and a training setup, and see the peak
// term by term against the target GPU's memory, a fit heat map over batch x
// sequence with the current point marked, and the largest batch and
// sequence that fit. Every number comes from core/memory's estimate; the
// heat map is its compiled form (about a millisecond for 128 x 128), so
// dragging a slider updates everything at once.

#include <QPointer>
#include <QWidget>

#include <map>
#include <optional>

#include "config/RunConfig.h"
#include "gpu/Catalogue.h"
#include "memory/Architectures.h"
#include "memory/DerivedStep.h"
#include "memory/Estimator.h"
#include "memory/MemoryPlan.h"

class QCheckBox;
class QComboBox;
class QCPBars;
class QCPColorMap;
class QCPGraph;
class QCPItemStraightLine;
class QCustomPlot;
class QLabel;
class QMouseEvent;
class QProcess;
class QTemporaryFile;
class QPushButton;
class QSlider;
class QSpinBox;

namespace tb::ui {

class ConfigDocument;
class GpuTargetModel;
class StepDeriver;
class TuneDialog;

class MemoryPlannerPanel final : public QWidget {
    Q_OBJECT

public:
    explicit MemoryPlannerPanel(ConfigDocument* document, QWidget* parent = nullptr);
    ~MemoryPlannerPanel() override; // stops a derivation in progress

    // The GPU planned for (the Hardware panel's target).
    // The window's target GPU: the plan follows its changes. Until one is
    // set, a model of the panel's own (the catalogue's T4).
    void setTargetModel(GpuTargetModel* targets);
    // The window's deriver, shared with the Diagnostics panel (the panel has its own until then).
    void setStepDeriver(StepDeriver* deriver);
    // "experiment", a preset id ("llama-2-7b"), or "imported" once a file was imported.
    bool selectSource(const QString& source);
    QString source() const;
    // Reads a Hugging Face config.json and plans for it (from its own step,
    // traced from a scratch folder holding it).
    bool importHfConfig(const QString& path, QString* error);

    void setBatch(int batch);
    void setSeqLen(int seqLen);
    int batch() const;
    int seqLen() const;
    QSpinBox* batchBox() const { return m_batchBox; }
    QSlider* batchSlider() const { return m_batchSlider; }
    QSlider* seqSlider() const { return m_seqSlider; }
    QComboBox* precisionBox() const { return m_precision; }
    QCheckBox* checkpointingBox() const { return m_checkpointing; }
    QSpinBox* loraRankBox() const { return m_loraRank; }

    // What is shown, for tests: nullopt while there is nothing to plan (an invalid experiment).
    const std::optional<MemoryEstimate>& estimate() const { return m_estimate; }
    const FitMap& fitMap() const { return m_map; }
    // The setup the plan shown is evaluated for (its batch and sequence the
    // panel's), or nullopt while there is none.
    std::optional<TrainingSetup> plannedSetup() const;
    std::int64_t largestBatchHere() const { return m_largestBatch; }
    std::int64_t largestSeqHere() const { return m_largestSeq; }
    std::int64_t budgetBytes() const;
    QString verdictText() const;
    QString answersText() const;
    // The term under a point of the bar plot ("" between bars): its tooltip.
    QString termTipAt(const QPoint& plotPos) const;
    QCustomPlot* termPlot() const { return m_termPlot; }
    QCustomPlot* mapPlot() const { return m_mapPlot; }
    QPushButton* applyButton() const { return m_apply; }
    QPushButton* tuneButton() const { return m_tuneButton; }
    // Tune…: the experiment's fastest configuration that fits, for the
    // planner's target card or measured on this computer (TuneDialog.h).
    // Opens it (or raises the one open) and returns it.
    TuneDialog* openTuneDialog();
    // Why Apply is greyed out ("" when it is not).
    QString applyNote() const;
    // A TorchScript experiment's plan is derived from its own step, traced
    // by trainbench-cli on this CPU: the button starts and cancels it.
    QPushButton* deriveButton() const { return m_derive; }
    QPushButton* compareNf4Button() const { return m_compareNf4; }
    bool deriving() const; // the deriver is tracing a step

public Q_SLOTS:
    // Copies everything the experiment's config can express (batch, sequence,
    // precision, checkpointing, attention, LoRA rank and targets, gradient
    // accumulation, optimizer) and returns what changed, as `applied` says it.
    QString applyToExperiment();

Q_SIGNALS:
    // A sentence for the status bar: what Apply changed, or why nothing.
    void applied(const QString& message);

    // After every update (estimate, answers, plots); carries the time it took.
    void updated(double milliseconds);

private:
    static constexpr int kMapCells = 128;     // the heat map is kMapCells x kMapCells
    static constexpr int kBatchLimit = 65536; // the batch spin box's limit
    // The widgets (MemoryPlannerLayout.cpp).
    QWidget* buildInputs();
    QWidget* buildResults();
    void buildTermPlot();
    void buildMapPlot();
    void wireInputs();
    void updateApplyState();
    const GpuTarget& target() const;
    void showTarget();
    struct Plan {
        // The plan asked (memory/MemoryPlan.h): the model's own step.
        MemoryPlan memory;
        TrainingSetup setup;
    };
    // The plan of the inputs; with `quantize`, of the experiment's config
    // with its base stored so ("nf4", "none": the comparison line).
    std::optional<Plan> currentPlan(QString* why, const std::string* quantize = nullptr) const;
    std::optional<Plan> derivedPlan(QString* why, const std::string* quantize, const RunConfig& config) const;
    QString quantizedComparison() const; // "Base stored in NF4 (QLoRA): ..." or the unquantized plan
    // The config planned from its own step (the experiment's, or an imported
    // config.json's as an experiment) with the planner's inputs applied (what
    // a derived step is traced for) and its key (batch and sequence left
    // out); nullopt with why when it cannot be traced.
    std::optional<RunConfig> derivedConfig(std::string* key, QString* why, const std::string* quantize = nullptr) const;
    // Whether the source has a step to plan from (a valid experiment, a
    // preset, an imported config.json).
    bool plannedFromStep() const;
    void deriveOrCancel();
    void updateDeriveButton();
    void updateCompareButton();
    void compareWithNf4();
    void loadFromExperiment();
    void inputsChanged();   // anything but batch and sequence: the map too
    void pointChanged();    // batch or sequence: estimate, answers, marker
    void rebuildMap(const Plan& plan);
    void showTerms();
    void showMarker();
    void syncSliderRanges(const Plan& plan);
    void mapClicked(QMouseEvent* event);
    void termPlotHover(QMouseEvent* event);

    ConfigDocument* m_document;
    GpuTargetModel* m_targets = nullptr;
    // An imported config.json as the experiment its step is traced from
    // (memory/Architectures.h).
    std::optional<PublishedExperiment> m_importedStep;
    // Each preset as such an experiment (built when its LoRA plan is first
    // asked for; the scratch folders live while the panel does).
    mutable std::map<QString, PublishedExperiment> m_presetSteps;
    // The published model chosen (a preset or the imported config.json) as
    // an experiment to trace; null for the experiment, or why not.
    const PublishedExperiment* publishedStep(QString* why) const;
    // Starts tracing the plan shown when it is its own step's and not yet derived.
    void deriveShownPlan();
    void deriveUnquantizedComparison();
    QString m_lastSource = "experiment";

    QComboBox* m_source;
    QPushButton* m_import;
    QLabel* m_targetLabel;
    QSlider* m_batchSlider;
    QSpinBox* m_batchBox;
    QSlider* m_seqSlider;
    QSpinBox* m_seqBox;
    QComboBox* m_precision;
    QComboBox* m_optimizer;
    QCheckBox* m_checkpointing;
    QComboBox* m_attention;
    QSpinBox* m_loraRank;
    QComboBox* m_loraTargets;
    QSpinBox* m_gradAccum;
    QLabel* m_verdict;
    QLabel* m_answers;
    QLabel* m_notes;
    QCustomPlot* m_termPlot;
    QCPItemStraightLine* m_budgetLine = nullptr;
    QCustomPlot* m_mapPlot;
    QCPColorMap* m_colorMap = nullptr;
    QCPGraph* m_frontier = nullptr;
    QCPGraph* m_marker = nullptr;
    QPushButton* m_apply;
    QPushButton* m_tuneButton;
    QPointer<TuneDialog> m_tuneDialog;
    QLabel* m_applyNote;
    QPushButton* m_derive;
    QPushButton* m_compareNf4;
    QPointer<StepDeriver> m_deriver; // the window's may be destroyed first
    std::string m_deriveRequested; // the key Derive plan asked for last (its button cancels it)

    std::optional<MemoryEstimate> m_estimate;
    QString m_precisionError; // preflight's error for the planned precision on the target; empty: it runs
    FitMap m_map;
    std::int64_t m_largestBatch = 0, m_largestSeq = 0;
    bool m_updating = false;
};

} // namespace tb::ui
