"""Every default of ``~/.memmy/config.yaml`` (root key ``memmyMemory``), in one place.

The shape mirrors the YAML file so that a user's partial file can be deep-merged over it and every key
validated against the type of its default. Values follow the product docs ("Tuning config.yaml") and the
upstream engine's defaults.
"""

from __future__ import annotations

from typing import Any

DEFAULT_PORT = 18960
DEFAULT_HOST = "127.0.0.1"
DEFAULT_ENDPOINT = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
MAX_BODY_BYTES = 2 * 1024 * 1024


def _llm_defaults(max_tokens: int, timeout_ms: int, retries: int, thinking: bool) -> dict[str, Any]:
    return {
        "provider": "",
        "vendor": "openai_compatible",
        "endpoint": "",
        "model": "",
        "apiKey": "",
        "temperature": 0.0,
        "maxTokens": max_tokens,
        "timeoutMs": timeout_ms,
        "maxRetries": retries,
        "enableThinking": thinking,
        # false: no response_format (llama.cpp's grammar made a 0.5B model 5-10x slower); answers still parsed
        "jsonMode": True,
        "repeatPenalty": 0.0,  # > 0: sent as repeat_penalty (llama.cpp, Ollama); ~1.3 helps small local models
    }


def default_tree() -> dict[str, Any]:
    """Return a fresh copy of the full default configuration tree."""
    return {
        "version": 1,
        "domain": "",
        "userId": "local-user",
        "activeProfile": "byok",
        "storage": {
            "mode": "local",
            "backend": "sqlite",
            "sqlitePath": "",
            # backend "postgres": postgresql://user:pass@host/db (or MEMMY_POSTGRES_DSN); several daemons may share it.
            "postgresDsn": "",
            "endpoint": DEFAULT_ENDPOINT,
            "token": "",
        },
        "server": {
            "host": DEFAULT_HOST,
            "port": DEFAULT_PORT,
            "maxBodyBytes": MAX_BODY_BYTES,
            # "token" (default): every route but the minimal health needs storage.token, created at the first
            # init/serve. "none": no token check at all (any local process may read and write memory).
            "auth": "token",
            # Extra browser origins (e.g. "http://localhost:5173") allowed to call the daemon; the daemon's own
            # loopback origin is always allowed, "null" and every other origin never.
            "allowedOrigins": [],
        },
        "summary": _llm_defaults(512, 45_000, 3, False),
        # evolution.review: "off" | "required" (new L2/L3/Skills wait in the panel's review queue until approved).
        "evolution": {**_llm_defaults(4096, 180_000, 2, True), "review": "off"},
        # Daily cap on LLM use (UTC day, 0 = unlimited); past it evolution and recall fall back to heuristics.
        "llmBudget": {
            "dailyCalls": 2000,
            "dailyTokens": 2_000_000,
        },
        "embedding": {
            "provider": "local",
            "model": "all-MiniLM-L6-v2",
            "endpoint": "",
            "apiKey": "",
            "batchSize": 32,
            "timeoutMs": 60_000,
            "maxRetries": 2,
        },
        # Secret redaction (docs/config.md "redaction"): extra rules ({name, pattern}) and allowlisted regexes.
        "redaction": {
            "extraPatterns": [],
            "allowlist": [],
        },
        # Audit rows are kept forever unless retentionDays > 0; a prune is itself audited (never silent).
        "audit": {"retentionDays": 0},
        "dream": {
            "enabled": False,
            "intervalHours": 24,
            "lookbackDays": 14,
            "duplicateSimilarity": 0.95,
            "staleDays": 90,
            "maxChanges": 500,
        },
        "algorithm": {
            "enableMemoryAdd": True,
            "enableMemorySearch": True,
            "enableQueryRewrite": False,
            "capture": {
                "maxTextChars": 4000,
                "maxToolOutputChars": 2000,
                "synthReflection": True,
                "embedAfterCapture": True,
                "alphaScoring": True,
                "batchThreshold": 12,
                "reflectionContextMode": "task_downstream",
                "longEpisodeReflectMode": "per_step_downstream",
                "downstreamStepCount": 3,
                "taskContextMaxChars": 800,
                "reflectionBatchWindowSize": 6,
                "reflectionBatchWindowOverlap": 1,
                "degradedBatchWindowSize": 3,
                "degradedBatchWindowOverlap": 1,
                "primaryMaxRetries": 1,
                "degradedMaxRetries": 2,
                "stateMaxChars": 600,
                "thinkingMaxChars": 300,
                "actionMaxChars": 600,
                "toolInputMaxChars": 120,
                "toolOutputMaxChars": 160,
                "toolErrorMaxChars": 160,
                "outcomeMaxChars": 240,
                "reflectionMaxChars": 300,
            },
            "reward": {
                "llmScoring": True,
                "gamma": 0.9,
                "lambda": 0.5,
                "delta": 0.1,
                "tauSoftmax": 0.5,
                "decayHalfLifeDays": 30,
                "implicitThreshold": 0.2,
                "feedbackWindowSec": 30,
                "summaryMaxChars": 2000,
                "minExchangesForCompletion": 1,
                "minContentCharsForCompletion": 40,
                "toolHeavyRatio": 0.7,
                "minAssistantCharsForToolHeavy": 80,
            },
            "feedback": {
                "failureThreshold": 3,
                "failureWindow": 5,
                "valueDelta": 0.5,
                "minLowValueThreshold": 0.01,
                "useLlm": True,
                "attachToPolicy": True,
                "cooldownMs": 60_000,
                "traceCharCap": 500,
                "evidenceLimit": 4,
            },
            "l2Induction": {
                "useLlm": True,
                "minEpisodesForInduction": 1,
                "minSimilarity": 0.65,
                "candidateTtlDays": 30,
                "minTraceValue": 0.005,
                "minGain": 0.02,
                "archiveGain": -0.05,
                "traceCharCap": 3000,
                "tauSoftmax": 0.5,
                "gainEmaAlpha": 0.4,
            },
            "l3Abstraction": {
                "useLlm": True,
                "minPolicies": 1,
                "minPolicyGain": 0.02,
                "minPolicySupport": 1,
                "clusterMinSimilarity": 0.3,
                "policyCharCap": 800,
                "traceCharCap": 500,
                "cooldownDays": 0,
                "confidenceDelta": 0.05,
                "minConfidenceForRetrieval": 0.2,
            },
            "skill": {
                "useLlm": True,
                "minEtaForRetrieval": 0.1,
                "minSupport": 1,
                "minGain": 0.02,
                "candidateTrials": 1,
                "cooldownMs": 0,
                "traceCharCap": 500,
                "evidenceLimit": 6,
                "etaDelta": 0.1,
                "archiveEta": 0.1,
                "repairCandidateMinEta": 0.5,
                "outputLanguageMode": "follow_policy",
                "outcomeRTaskSuccessThreshold": 0.5,
                "outcomeRTaskFailureThreshold": -0.15,
                "failureEpisodeMaxRatio": 0.4,
            },
            "session": {
                "followUpMode": "merge_follow_ups",
                "mergeMaxGapMs": 7_200_000,
            },
            "retrieval": {
                "tier1TopK": 3,
                "tier2TopK": 5,
                "tier3TopK": 2,
                "candidatePoolFactor": 4,
                "weightCosine": 0.6,
                "weightPriority": 0.4,
                "mmrLambda": 0.7,
                "contextWindow": 1,
                "contextWindowTokens": 256,
                "contextWindowResults": 1,
                "queryExpansion": "off",
                "rrfConstant": 60,
                "relativeThresholdFloor": 0.2,
                "minSkillEta": 0.1,
                "minTraceSim": 0.25,
                "episodeGoalMinSim": 0.45,
                "tagFilter": "auto",
                "keywordTopK": 20,
                "skillEtaBlend": 0.15,
                "smartSeed": True,
                "smartSeedRatio": 0.7,
                "multiChannelBypass": True,
                "skillInjectionMode": "summary",
                "skillSummaryChars": 200,
                "llmFilterEnabled": True,
                "llmFilterMaxKeep": 8,
                "llmFilterFallbackMaxKeep": 6,
                "llmFilterMinCandidates": 1,
                "llmFilterCandidateBodyChars": 500,
                "readOnlyInjectionProfile": "all",
                "defaultScope": "auto",
                "llmQueryExtract": False,
                "llmInHookPath": False,
                "llmTimeoutMs": 2000,
                "injectionSemanticGate": True,
                # the whole turn-start injection (estimated tokens); 0 = the reference layout without a budget
                "injectionTokenBudget": 400,
            },
        },
    }


#: Allowed values for string settings that are enumerations (dotted path -> choices).
ENUMS: dict[str, tuple[str, ...]] = {
    "domain": ("", "research"),
    "activeProfile": ("byok", "account"),
    "storage.mode": ("local",),
    "storage.backend": ("sqlite", "postgres"),
    "server.auth": ("token", "none"),
    "embedding.provider": ("local", "openai_compatible"),
    "summary.provider": ("", "openai_compatible", "local_only", "host"),
    "evolution.provider": ("", "openai_compatible", "local_only", "host"),
    "algorithm.retrieval.tagFilter": ("auto", "on", "off"),
    "algorithm.retrieval.queryExpansion": ("prf", "off"),
    "algorithm.retrieval.skillInjectionMode": ("summary", "full"),
    "algorithm.retrieval.readOnlyInjectionProfile": ("all", "experience", "skill", "skill_experience"),
    "algorithm.retrieval.defaultScope": ("auto", "pooled", "project", "agent"),
    "algorithm.session.followUpMode": ("merge_follow_ups", "episode_per_turn"),
}

#: Keys that hold free-form mappings (not validated key by key).
FREE_FORM: frozenset[str] = frozenset({"profiles", "app"})
