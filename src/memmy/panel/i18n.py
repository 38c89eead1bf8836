"""The panel's two languages: English and Chinese, chosen from ``?lang=`` (kept in a cookie), or the browser's
Accept-Language."""

from __future__ import annotations

LANGUAGES = ("en", "zh")
#: The cookie that keeps a ``?lang=`` choice for the next pages (a year, path ``/panel``).
LANG_COOKIE = "memmy_lang"

#: key -> (English, Chinese)
TEXTS: dict[str, tuple[str, str]] = {
    "title": ("Memory panel", "记忆面板"),
    "skip": ("Skip to content", "跳到正文"),
    "overview": ("Overview", "概览"),
    "memories": ("Memories", "记忆"),
    "tasks": ("Tasks", "任务"),
    "experiences": ("Experiences", "经验"),
    "world_models": ("World models", "世界模型"),
    "skills": ("Skills", "技能"),
    "review": ("Review queue", "审核队列"),
    "recalls": ("Recalls", "召回"),
    "analytics": ("Analytics", "分析"),
    "logs": ("Logs", "日志"),
    "agents": ("Cross-agent", "跨智能体"),
    "settings": ("Settings", "设置"),
    "sign_out": ("Sign out", "退出"),
    "signed_out": ("Not signed in", "未登录"),
    "signed_out_help": (
        "Open the panel with `memmy-memory panel`: it prints (and opens) a one-time sign-in link.",
        "请运行 `memmy-memory panel`：它会打印（并打开）一次性登录链接。",
    ),
    "link_used": ("This sign-in link is unknown, used or expired.", "此登录链接无效、已使用或已过期。"),
    "search": ("Search", "搜索"),
    "search_placeholder": ("Search memories (press / to focus)", "搜索记忆（按 / 聚焦）"),
    "layer": ("Layer", "层"),
    "status": ("Status", "状态"),
    "agent": ("Agent", "智能体"),
    "project": ("Project", "项目"),
    "changed_from": ("Changed from", "修改于（起）"),
    "add_agent": ("Add another agent", "添加其他智能体"),
    "add_agent_help": (
        "For an agent memmy has no reader for: where its history lives and which fields hold the messages "
        "(what `memmy-memory sources add` takes, see docs/import.md). The history is read once to check the recipe, "
        "then imported with live progress.",
        "用于 memmy 没有内置读取器的智能体：历史记录的位置，以及消息所在的字段（与 `memmy-memory sources add` 相同，"
        "见 docs/import.md）。先读取一次以检查配方，然后导入并显示实时进度。",
    ),
    "history_path": ("History (absolute path)", "历史记录（绝对路径）"),
    "format": ("Format", "格式"),
    "field_map": ("Fields (FIELD=path)", "字段（字段=路径）"),
    "role_map": ("Roles (raw=role)", "角色（原始=角色）"),
    "records_path": ("JSON records path", "JSON 记录路径"),
    "changed_to": ("to", "至"),
    "any": ("any", "全部"),
    "filter": ("Filter", "筛选"),
    "created": ("Created", "创建时间"),
    "updated": ("Updated", "更新时间"),
    "content": ("Content", "内容"),
    "summary": ("Summary", "摘要"),
    "source": ("Source", "来源"),
    "provenance": ("Provenance", "出处"),
    "history": ("History", "历史版本"),
    "validity": ("Validity", "有效期"),
    "recalled_in": ("Recalled in", "出现在这些召回中"),
    "edit": ("Edit (new version)", "编辑（新版本）"),
    "save": ("Save", "保存"),
    "delete": ("Delete", "删除"),
    "delete_confirm": (
        "Delete? It is hidden and no longer recalled; Restore brings it back, and adding the same text again does too.",
        "删除？它会被隐藏、不再被召回；可以恢复，再次添加相同内容也会让它回来。",
    ),
    "forget": ("Forget for good", "永久遗忘"),
    "forget_confirm": (
        "Forget for good? It is deleted and its text can never be stored again (adds, captures and re-imports are "
        "refused) until you restore it under Forgotten values.",
        "永久遗忘？它会被删除，且其内容不会再被保存（添加、捕获和重新导入都会被拒绝），除非在“已遗忘的内容”中恢复。",
    ),
    "archive": ("Archive", "归档"),
    "activate": ("Activate", "启用"),
    "restore": ("Restore", "恢复"),
    "forgotten": ("Forgotten values", "已遗忘的内容"),
    "approve": ("Approve", "批准"),
    "edit_approve": ("Edit and approve", "编辑后批准"),
    "reject": ("Reject", "拒绝"),
    "nothing": ("Nothing here yet.", "暂无内容。"),
    "counts": ("Counts", "数量"),
    "injected_today": ("Injected today", "今日注入"),
    "sources": ("Sources", "来源"),
    "last_sync": ("Last sync", "上次同步"),
    "queue": ("Embedding queue", "向量化队列"),
    "pending": ("pending", "待处理"),
    "failed": ("failed", "失败"),
    "warnings": ("Warnings", "警告"),
    "no_warnings": ("No warnings.", "没有警告。"),
    "worker": ("Evolution worker", "演化进程"),
    "running": ("running", "运行中"),
    "stopped": ("stopped", "已停止"),
    "evidence": ("Evidence", "依据"),
    "searching": ("Searching…", "正在搜索…"),
    "show_results": ("Show the results", "显示结果"),
    "channels": ("Channels", "通道"),
    "dropped": ("Dropped", "被丢弃"),
    "score": ("Score", "得分"),
    "reward": ("Reward", "奖励"),
    "feedback": ("Feedback", "反馈"),
    "positive": ("Helpful", "有帮助"),
    "negative": ("Wrong", "不对"),
    "note": ("Note", "备注"),
    "send": ("Send", "发送"),
    "turns": ("Turns", "轮次"),
    "prompt": ("Prompt", "提示"),
    "injected": ("Injected", "注入内容"),
    "tokens": ("Tokens", "令牌数"),
    "latency": ("Latency", "延迟"),
    "mark_wrong": ("Mark wrong", "标记为错误"),
    "memories_per_day": ("Memories per day (30 days)", "每日新增记忆（30 天）"),
    "injections_per_day": ("Injected tokens per day", "每日注入令牌数"),
    "hit_rate": ("Hit rate", "命中率"),
    "top_agents": ("Top agents", "主要智能体"),
    "top_projects": ("Top projects", "主要项目"),
    "audit_log": ("Audit log", "审计日志"),
    "api_log": ("API log", "API 日志"),
    "change_log": ("Change log", "变更日志"),
    "dream_runs": ("Dream runs", "Dream 运行"),
    "action": ("Action", "操作"),
    "actor": ("Who", "操作者"),
    "target": ("Target", "对象"),
    "when": ("When", "时间"),
    "detected": ("Detected agents", "检测到的智能体"),
    "history_counts": ("Imported turns", "已导入轮次"),
    "sync_now": ("Sync now", "立即同步"),
    "deep_scan": ("Deep scan", "深度扫描"),
    "pause": ("Pause", "暂停"),
    "resume": ("Resume", "继续"),
    "stop": ("Stop", "停止"),
    "progress": ("Progress", "进度"),
    "integrations": ("Integrations", "集成"),
    "install_hint": ("The same from a terminal:", "在终端中同样可以："),
    "install": ("Install", "安装"),
    "remove": ("Remove", "移除"),
    "effective_config": ("Effective config (secrets masked)", "生效配置（已隐藏密钥）"),
    "reload": ("Reload config", "重新加载配置"),
    "data_location": ("Where the data lives", "数据位置"),
    "export": ("Export", "导出"),
    "export_help": ("Download the whole store as one archive.", "将整个存储下载为一个归档文件。"),
    "no_raw": ("Leave out raw turns", "不包含原始对话"),
    "import": ("Import", "导入"),
    "archive_file": ("Export archive (.zip)", "导出归档（.zip）"),
    "on_conflict": ("On conflict", "冲突时"),
    "dry_run": ("Dry run (only count)", "试运行（只计数）"),
    "wipe": ("Wipe", "清空"),
    "wipe_help": (
        "Removes every memory and all history; config and tokens stay. A backup is written first.",
        "删除所有记忆和历史；配置和令牌保留。会先写入备份。",
    ),
    "confirm_wipe": ("I understand: wipe the store", "我确认：清空存储"),
    "skip_backup": ("No backup", "不备份"),
    "done": ("Done.", "完成。"),
    "error": ("Error", "错误"),
    "review_off": (
        "Review is off: set `evolution.review: required` in config.yaml to hold new L2/L3/Skills here.",
        "审核未开启：在 config.yaml 中设置 `evolution.review: required`，新的 L2/L3/技能将在此等待审核。",
    ),
    "rejected": ("Rejected", "已拒绝"),
    "approved": ("Approved", "已批准"),
    "prev": ("Previous", "上一页"),
    "next": ("Next", "下一页"),
    "total": ("total", "共"),
    "why": ("Why", "原因"),
    "trigger": ("Trigger", "触发条件"),
    "guidance": ("Guidance", "指导"),
    "support": ("Support", "支持度"),
}


def pick_language(accept_language: str | None, override: str | None = None, kept: str | None = None) -> str:
    """``override`` (``?lang=``) when it is a known language, else ``kept`` (the cookie), else the first known one
    in Accept-Language, else English."""
    for choice in (override, kept):
        if choice in LANGUAGES:
            return str(choice)
    ranked: list[tuple[float, str]] = []
    for index, part in enumerate((accept_language or "").split(",")):
        pieces = part.strip().split(";")
        tag = pieces[0].strip().lower()
        quality = 1.0
        for param in pieces[1:]:
            if param.strip().startswith("q="):
                try:
                    quality = float(param.strip()[2:])
                except ValueError:
                    quality = 0.0
        ranked.append((-quality + index * 1e-6, tag))
    for _, tag in sorted(ranked):
        base = tag.split("-")[0]
        if base in LANGUAGES:
            return base
    return "en"


def translator(language: str) -> dict[str, str]:
    """key -> text in ``language`` (unknown keys fall back to the key itself in templates)."""
    index = LANGUAGES.index(language) if language in LANGUAGES else 0
    return {key: pair[index] for key, pair in TEXTS.items()}
