#pragma once
// The window's derived plans: a config planned from its own training step (a
// TorchScript model, a quantized base, a folder whose head size is its own)
// is traced by `trainbench-cli estimate --derived` in a process of its own
// (seconds; a run training in this process is not disturbed), and the plan
// kept by what the step depends on. The Memory planner and the Diagnostics
// panel share one deriver, so a plan derived for one answers the other.

#include <QObject>
#include <QString>

#include <map>
#include <memory>
#include <string>

#include "config/RunConfig.h"
#include "memory/DerivedStep.h"

class QProcess;
class QTemporaryFile;

namespace tb::ui {

class StepDeriver : public QObject {
    Q_OBJECT
public:
    explicit StepDeriver(QObject* parent = nullptr);
    ~StepDeriver() override;

    // What a traced step depends on: the config (as the step is traced:
    // precision resolved, paths absolute) less what does not change its
    // allocations (batch and sequence are the plan's inputs; the name, the
    // schedule, the seed, how long and how often a run trains or reports),
    // and the model file's or folder config.json's size and time.
    static std::string keyFor(const RunConfig& traced);
    // The config with its paths absolute: the step is traced from a
    // temporary file.
    static RunConfig standalone(RunConfig config);

    // The plan derived for a key, or null.
    std::shared_ptr<const DerivedStep> plan(const std::string& key) const;
    // Every plan derived so far (for a check running on another thread).
    std::map<std::string, std::shared_ptr<const DerivedStep>> plans() const { return m_plans; }

    // Trace the step of this config (one at a time: a request while another
    // runs waits, the newest wins). Nothing when its plan is known, or it
    // failed and again is false.
    void derive(const RunConfig& traced, bool again = false);
    // Stop tracing this key, or drop it from the queue.
    void cancel(const std::string& key);

    bool running() const { return m_process != nullptr; }
    const std::string& runningKey() const { return m_runningKey; }
    std::string queuedKey() const { return m_next ? m_next->second : std::string(); }
    QString progress() const { return m_progress; }       // "traced step 5 (batch 2, sequence 9)"
    QString error(const std::string& key) const;           // why the last try for the key failed; empty if none

Q_SIGNALS:
    void changed(); // started, progressed, derived, failed or cancelled

private:
    void start(const RunConfig& traced, const std::string& key);
    void finish();

    std::map<std::string, std::shared_ptr<const DerivedStep>> m_plans;
    std::map<std::string, QString> m_errors;
    QProcess* m_process = nullptr;
    QTemporaryFile* m_file = nullptr;
    std::string m_runningKey;
    QString m_progress;
    QString m_runError;
    bool m_cancelled = false;
    std::unique_ptr<std::pair<RunConfig, std::string>> m_next; // waiting its turn
};

} // namespace tb::ui
