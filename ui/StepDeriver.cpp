#include "StepDeriver.h"

#include <algorithm>
#include <QDir>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryFile>

#include "CliProgram.h"
#include "train/DerivedPlan.h"

namespace tb::ui {

StepDeriver::StepDeriver(QObject* parent) : QObject(parent) {}

StepDeriver::~StepDeriver()
{
    if (!m_process) return;
    // Its signals must not reach a deriver being destroyed.
    m_process->disconnect(this);
    m_process->kill();
    m_process->waitForFinished(3000);
}

std::string StepDeriver::keyFor(const RunConfig& traced)
{
    return derivedStepKey(traced);
}

RunConfig StepDeriver::standalone(RunConfig c)
{
    // The step is traced on this CPU whatever the run's device; a GPU's
    // precision (fp16 on a T4) is valid only in a config for CUDA.
    if (c.train.precision == "fp16" && c.device.rfind("cuda", 0) != 0) c.device = "cuda";
    c.model.path = resolvedModelPath(c);
    c.data.path = resolvedDataPath(c);
    const QString init = QString::fromStdString(c.train.initFrom);
    const bool runReference = init.startsWith("run:") || (!init.isEmpty() && init.toLongLong() > 0);
    if (!init.isEmpty() && !runReference && QFileInfo(init).isRelative() && !c.baseDir.empty()) {
        c.train.initFrom = QDir(QString::fromStdString(c.baseDir)).absoluteFilePath(init).toStdString();
    }
    return c;
}

std::shared_ptr<const DerivedStep> StepDeriver::plan(const std::string& key) const
{
    const auto it = m_plans.find(key);
    return it == m_plans.end() ? nullptr : it->second;
}

QString StepDeriver::error(const std::string& key) const
{
    const auto it = m_errors.find(key);
    return it == m_errors.end() ? QString() : it->second;
}

void StepDeriver::derive(const RunConfig& traced, bool again)
{
    const auto key = keyFor(traced);
    if (!again && (m_plans.count(key) || m_errors.count(key))) return;
    if (m_process) {
        if (key != m_runningKey) m_next = std::make_unique<std::pair<RunConfig, std::string>>(traced, key);
        return;
    }
    start(traced, key);
}

void StepDeriver::cancel(const std::string& key)
{
    if (m_next && m_next->second == key) {
        m_next.reset();
        m_errors[key] = tr("cancelled; press Derive plan to trace it again.");
        Q_EMIT changed();
    }
    if (!m_process || m_runningKey != key) return;
    m_cancelled = true;
    m_process->kill(); // finished() tidies up
}

void StepDeriver::start(const RunConfig& traced, const std::string& key)
{
    m_errors.erase(key);
    m_runError.clear();
    m_progress.clear();
    m_cancelled = false;
    m_runningKey = key;
    m_file = new QTemporaryFile(QDir::tempPath() + "/trainbench-derive-XXXXXX.json", this);
    if (!m_file->open() || m_file->write(QByteArray::fromStdString(configToJson(traced))) < 0) {
        m_errors[key] = tr("cannot write a temporary config in %1: %2").arg(QDir::tempPath(), m_file->errorString());
        delete m_file;
        m_file = nullptr;
        m_runningKey.clear();
        Q_EMIT changed();
        return;
    }
    m_file->flush();
    m_process = new QProcess(this);
    m_process->setProgram(cliProgram());
    m_process->setArguments({"estimate", "--derived", "--json", "--config", m_file->fileName()});
    m_process->setStandardInputFile(QProcess::nullDevice());
    connect(m_process, &QProcess::readyReadStandardError, this, [this] {
        // "traced step N (batch B, sequence T)" per step; an error comes last.
        const auto lines = QString::fromUtf8(m_process->readAllStandardError()).split('\n', Qt::SkipEmptyParts);
        for (const auto& line : lines) {
            if (line.startsWith("traced step")) m_progress = line;
            else if (line.contains("error: ")) m_runError = line.section("error: ", -1).trimmed();
            else if (line.startsWith("  ") && !m_runError.isEmpty()) m_runError += " " + line.trimmed(); // a config's problems
        }
        Q_EMIT changed();
    });
    connect(m_process, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
        const QByteArray out = m_process->readAllStandardOutput();
        QString error;
        if (status != QProcess::NormalExit) {
            error = m_cancelled ? tr("cancelled; press Derive plan to trace it again.")
                                : tr("trainbench-cli stopped unexpectedly (%1)").arg(m_process->errorString());
        } else if (code == 0) {
            try {
                const auto step = QJsonDocument::fromJson(out).object().value("derived_step").toObject();
                m_plans[m_runningKey] = std::make_shared<const DerivedStep>(
                    derivedStepFromJson(QJsonDocument(step).toJson(QJsonDocument::Compact).toStdString()));
            } catch (const std::exception& e) {
                error = QString::fromStdString(e.what());
            }
        } else {
            error = m_runError.isEmpty() ? tr("trainbench-cli stopped with exit code %1").arg(code) : m_runError;
        }
        if (!error.isEmpty()) m_errors[m_runningKey] = error;
        finish();
    });
    connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
        if (e != QProcess::FailedToStart) return;
        m_errors[m_runningKey] = tr("cannot start %1: %2 (set TRAINBENCH_CLI to its path)")
                                     .arg(m_process->program(), m_process->errorString());
        finish();
    });
    m_process->start();
    Q_EMIT changed();
}

void StepDeriver::finish()
{
    m_process->deleteLater();
    m_process = nullptr;
    m_file->deleteLater();
    m_file = nullptr;
    m_runningKey.clear();
    m_progress.clear();
    if (m_next) {
        const auto next = std::move(m_next);
        if (!m_plans.count(next->second)) {
            start(next->first, next->second);
            return;
        }
    }
    Q_EMIT changed();
}

} // namespace tb::ui
