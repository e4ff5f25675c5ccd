"""MkDocs hook: the reference pages, generated from the code at build time.

Writes five pages into the site (never into docs/): the command line from the typer app, the run
config's keys from its frozen config records, the policies from their registry (each module's
docstring states its paper's rule and kvwear's readings; its Params record the knobs), the device
backends from theirs (each backend's Params record and capabilities), and every output table from
the TableSpecs found in kvwear's modules. A field's meaning is the comment on its line in the
source, so the page says what the code says and cannot drift from it.

Must not: write files into the repository, or describe anything by hand that the code declares.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import sys
import typing
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:          # the checkout's kvwear, not another installed one
    sys.path.insert(0, str(REPO))

#: The generated pages, in nav order (docs_hooks/nav.py lists them under "Reference").
PAGES = {
    "reference/cli.md": "Command line",
    "reference/config.md": "Run and sweep config",
    "reference/policies.md": "Policies",
    "reference/devices.md": "Devices",
    "reference/models.md": "Model profiles",
    "reference/tables.md": "Output tables",
}

GENERATED_NOTE = ("*Generated from the code when the site is built (`docs_hooks/reference.py`): "
                  "edit the code, not this page.*\n")


def _comments(obj: Any) -> dict[str, str]:
    """name → the `# comment` on the line that declares it (a dataclass field `name: T = …` or a
    `pa.field("name", …)`), from the source of `obj` (a class or a module)."""
    try:
        src = inspect.getsource(obj)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    pending: list[str] = []          # a comment block above a field belongs to it
    for line in src.splitlines():
        s = line.strip()
        if s.startswith("#"):
            pending.append(s.lstrip("#").strip())
            continue
        m = (re.match(r"^\s*([a-z_][a-z0-9_]*)\s*:\s*[^=]+(?:=.*)?$", line)
             or re.match(r"^\s*pa\.field\(\s*\"([a-z_0-9]+)\"", line))
        if m:
            t = re.search(r"\s#\s*(.*)$", line)
            tail = t.group(1).strip() if t else ""
            text = " ".join([*pending, tail]).strip()
            if text:
                out.setdefault(m.group(1), text)
        pending = []
    return out


def _md(text: str) -> str:
    """Plain help or comment text safe in a Markdown table cell."""
    return " ".join(text.replace("\\[", "[").replace("|", "\\|").split())


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "list of " + _type_name(typing.get_args(tp)[0])
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(tp))
        name = getattr(origin, "__name__", str(origin))
        return "optional " + args.replace(", None", "") if name == "UnionType" or "None" in args else f"{name}[{args}]"
    return getattr(tp, "__name__", str(tp))


def _default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        return "" if f.default == "" else repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "(required)"


# -- the command line ---------------------------------------------------------------------------

def cli_page() -> str:
    import typer.main

    from kvwear.harness.cli.main import app

    root = typer.main.get_command(app)
    out = ["# Command line", "", GENERATED_NOTE,
           "Every command answers `--help` (or `-h`) with the same text. Exit status: 0 success, 2 bad "
           "input (one line `kvwear: error: …` naming the file, line and field, or the flag), 3 a "
           "byte-accounting fault (`run`, `sweep`).", ""]

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if path:
            out.append(f"## `kvwear {' '.join(path)}`")
            out.append("")
            if cmd.help:
                out.append(_prose(cmd.help))
                out.append("")
            params = [p for p in cmd.params if p.name != "help"]
            ctx = cmd.make_context("kvwear " + " ".join(path), [], resilient_parsing=True)
            if params:
                out.append("| argument or option | type | default | meaning |")
                out.append("|---|---|---|---|")
                for p in params:
                    names = " / ".join(f"`{o}`" for o in [*p.opts, *getattr(p, "secondary_opts", [])])
                    if p.param_type_name == "argument":
                        names = f"`{p.name.upper()}`" + ("" if p.required else " (optional)")
                    typ = "flag" if getattr(p, "is_flag", False) else _type_of(p, ctx)
                    default = "" if p.default in (None, (), []) or p.required else f"`{p.default}`"
                    out.append(f"| {names} | {typ} | {_md(default)} | {_md(getattr(p, 'help', '') or '')} |")
                out.append("")
            if cmd.epilog:
                out.append("```text")
                out.append(cmd.epilog.replace("\\[", "[").strip("\n"))
                out.append("```")
                out.append("")
        if isinstance(subs, dict):
            for name in sorted(subs):
                walk(subs[name], [*path, name])

    walk(root, [])
    return "\n".join(out) + "\n"


def _type_of(p: Any, ctx: Any) -> str:
    """A parameter's type as its help shows it (typer's own click, or click's `type.name`)."""
    shown = p.display_type(ctx) if callable(getattr(p, "display_type", None)) else getattr(p.type, "name", "")
    return str(shown).strip("<>")


def _prose(help_text: str) -> str:
    """A command's help: paragraphs kept; indented example lines become a code block."""
    text = help_text.replace("\\[", "[").replace("\b", "")
    paras, code = [], []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if lines and all(ln.startswith("kvwear ") for ln in lines):
            code += lines
        elif lines:
            paras.append(" ".join(lines))
    if code:
        paras.append("```text\n" + "\n".join(code) + "\n```")
    return "\n\n".join(paras)


# -- config keys ----------------------------------------------------------------------------------

def config_page() -> str:
    from kvwear.harness.pipeline import config as c

    out = ["# Run and sweep config", "", GENERATED_NOTE,
           "A run config is TOML: the top-level keys below, then one table per section. Every key is "
           "optional (the default applies). `kvwear run CONFIG.toml` reads it; flags override it; the "
           "run directory keeps the resolved `config.toml`. Sizes take units (`64GB` = 64·10⁹, "
           "`48GiB` = 48·2³⁰); `*_s` durations take `90s`, `5min`, `1h`; bandwidths (`*_bytes_per_s`) "
           "take sizes. An unknown key is refused with the valid ones; a value out of range names the "
           "key and the range.", "",
           "Short names: " + ", ".join(f"`{a}` = `{f}`" for a, f in c._ALIASES.items()) + ".", ""]

    def table(cls: type, section: str) -> None:
        hints = typing.get_type_hints(cls)
        notes = _comments(cls)
        ranges = {name: valid for (sec, name), (_, valid) in c._RANGES.items() if sec == section}
        out.append("| key | type | default | meaning |")
        out.append("|---|---|---|---|")
        for f in dataclasses.fields(cls):
            if f.name in c._SECTIONS or f.name == "version":
                continue
            meaning = notes.get(f.name, "")
            if f.name in ranges:
                meaning = (meaning + f" Valid: {ranges[f.name]}.").strip()
            out.append(f"| `{f.name}` | {_md(_type_name(hints[f.name]))} | {_md(_default(f))} | {_md(meaning)} |")
        out.append("")

    out += ["## Top level", ""]
    table(c.RunConfig, "")
    for section, cls in c._SECTIONS.items():
        out += [f"## `[{section}]`", ""]
        doc = inspect.getdoc(cls)
        if doc and not doc.startswith(cls.__name__ + "("):
            out += [_md(doc), ""]
        table(cls, section)

    from kvwear.harness.pipeline import sweep as s

    out += ["## Sweep config", "",
            "A sweep TOML has a `[base]` table (a run config as above), a `[grid]` table whose axes "
            "multiply, and a `[sweep]` table of options. See the "
            "[sweeps guide](../guides/sweeps.md).", ""]
    doc = inspect.getdoc(s)
    if doc:
        out += ["From `kvwear.harness.pipeline.sweep`:", "", "```text", doc, "```", ""]
    return "\n".join(out) + "\n"


# -- policies -------------------------------------------------------------------------------------

def policies_page() -> str:
    from kvwear.policies.base import POLICIES, param_infos

    out = ["# Policies", "", GENERATED_NOTE,
           "A policy spec is `name` or `name:param=value,…` (`gandalf:gamma=8`, `lru-k:k=1..3` in a "
           "sweep grid). Each policy's section is its module's docstring: the paper's rule, then "
           "kvwear's reading of what the paper leaves open and the parameter that makes each choice.", ""]
    out += ["| policy | what it does |", "|---|---|"]
    for name in POLICIES.names():
        out.append(f"| [`{name}`](#{name}) | {_md(POLICIES.get(name).describe())} |")
    out.append("")
    for name in POLICIES.names():
        cls = POLICIES.get(name)
        out += [f"## `{name}` {{#{name}}}", "", f"*{_md(cls.describe())}* — module `{cls.__module__}`", ""]
        infos = param_infos(cls.Params)
        if infos:
            out += ["| parameter | type | default | sweep range | meaning |", "|---|---|---|---|---|"]
            for p in infos:
                sweep = "" if p.sweep is None else " … ".join(str(x) for x in p.sweep)
                out.append(f"| `{p.name}` | {p.type_name} | `{p.default}` | {sweep} | {_md(p.help)} |")
            out.append("")
        doc = inspect.getdoc(sys.modules[cls.__module__]) or ""
        out += ["```text", doc, "```", ""]
    return "\n".join(out) + "\n"


# -- devices --------------------------------------------------------------------------------------

def devices_page() -> str:
    from kvwear.harness.devices.base import DEVICES, Capabilities

    cap_notes = _comments(Capabilities)
    out = ["# Devices", "", GENERATED_NOTE,
           "`--device KIND[:TARGET]` (or `[device] kind` and `target`) picks the backend; each option is "
           "`--device-option KEY=VALUE` (or `[device] options = {…}`), read into the backend's typed "
           "Params record: a mistyped name is refused with the valid ones, a bad value names the option "
           "and what it expects.", "",
           "Capabilities (what the pipeline asks a backend instead of testing its name):", ""]
    for f in dataclasses.fields(Capabilities):
        out.append(f"- `{f.name}`: {_md(cap_notes.get(f.name, ''))}")
    out.append("")
    seen: dict[type, str] = {}
    for name in DEVICES.names():
        cls = DEVICES.get(name)
        if cls in seen:
            out += [f"## `{name}`", "", f"The same backend as [`{seen[cls]}`](#{seen[cls]}).", ""]
            continue
        seen[cls] = name
        out += [f"## `{name}` {{#{name}}}", ""]
        doc = inspect.getdoc(cls) or ""
        if doc:
            out += [_md(doc), ""]
        caps = [f.name for f in dataclasses.fields(cls.capabilities) if getattr(cls.capabilities, f.name)]
        out += [f"Capabilities: {', '.join(f'`{c}`' for c in caps) or 'none'}. Module `{cls.__module__}`.", ""]
        params = cls.Params
        hints = typing.get_type_hints(params)
        notes: dict[str, str] = {}
        for klass in reversed(params.__mro__):
            if dataclasses.is_dataclass(klass):
                notes.update(_comments(klass))
        fields = dataclasses.fields(params)
        pdoc = inspect.getdoc(params) or ""
        if pdoc and fields:
            out += ["```text", pdoc, "```", ""]
        if not fields:
            out += ["No options.", ""]
            continue
        out += ["| option | type | default | limits | meaning |", "|---|---|---|---|---|"]
        for f in fields:
            lim = []
            if f.metadata.get("ge") is not None:
                lim.append(f"≥ {f.metadata['ge']}")
            if f.metadata.get("gt") is not None:
                lim.append(f"> {f.metadata['gt']}")
            if f.metadata.get("choices"):
                lim.append(" \\| ".join(f.metadata["choices"]))
            out.append(f"| `{f.name}` | {_md(_type_name(hints[f.name]))} | {_md(_default(f))} | {', '.join(lim)} | "
                       f"{_md(notes.get(f.name, ''))} |")
        out.append("")
    return "\n".join(out) + "\n"


# -- model profiles -------------------------------------------------------------------------------

def models_page() -> str:
    from kvwear.workloads import models as m

    out = ["# Model profiles", "", GENERATED_NOTE,
           "A model is a built-in profile name, an HF `config.json` or a small TOML file (`--model`, "
           "`model = …`); `kvwear models list` and `kvwear models show NAME` print what follows. Sizes are "
           "computed from the architecture's numbers, never stored: every profile explains its arithmetic.", "",
           "| profile | family | full-attention layers | KV bytes/token | state bytes/checkpoint "
           "| state ÷ 16-token chunk |",
           "|---|---|---|---|---|---|"]
    for name in m.PROFILES.names():
        p = m.PROFILES.get(name)
        state = f"{p.state_bytes:,} ({p.state_bytes / m.MIB:.1f} MiB)" if p.is_hybrid else "—"
        ratio = f"{p.state_chunk_ratio(16):.1f}" if p.is_hybrid else "—"
        out.append(f"| `{name}` | {p.family} | {p.full_attn_layers} of {p.total_layers} | {p.kv_bytes_per_token:,} | "
                   f"{state} | {ratio} |")
    out += ["", "## Formulas", "", "From `kvwear.workloads.models`:", "", "```text", inspect.getdoc(m) or "", "```", ""]
    for name in m.PROFILES.names():
        p = m.PROFILES.get(name)
        out += [f"## `{name}`", "", "```text", *m.explain(p, 16), "```", ""]
    return "\n".join(out) + "\n"


# -- tables ---------------------------------------------------------------------------------------

def table_specs() -> list[tuple[str, str, Any]]:
    """(module, attribute, TableSpec) for every TableSpec bound at module level in kvwear."""
    import kvwear
    from kvwear.tables import TableSpec

    found: dict[int, tuple[str, str, Any]] = {}
    for info in pkgutil.walk_packages(kvwear.__path__, "kvwear."):
        try:
            mod = importlib.import_module(info.name)
        except ImportError:           # an optional dependency (bcc, dask) absent here
            continue
        for attr, value in vars(mod).items():
            if isinstance(value, TableSpec) and getattr(mod, "__name__", "") == info.name:
                found.setdefault(id(value), (info.name, attr, value))
    # a spec is defined where its source line is; modules that import it come later
    out = []
    for mod_name, attr, spec in found.values():
        src = inspect.getsource(sys.modules[mod_name])
        if re.search(rf"^{attr}\s*=\s*TableSpec\(", src, re.M):
            out.append((mod_name, attr, spec))
        else:
            for m in list(sys.modules.values()):
                if m and getattr(m, "__name__", "").startswith("kvwear.") and getattr(m, attr, None) is spec:
                    try:
                        if re.search(rf"^{attr}\s*=\s*TableSpec\(", inspect.getsource(m), re.M):
                            out.append((m.__name__, attr, spec))
                            break
                    except (OSError, TypeError):
                        continue
    return sorted(out, key=lambda t: t[2].kind)


def tables_page() -> str:
    out = ["# Output tables", "", GENERATED_NOTE,
           "Every table kvwear writes is Parquet carrying its kind and schema version in its metadata "
           "(`kvwear.kind`, `kvwear.schema_version`), written atomically. A reader checks both. Where "
           "each table lands in a run directory: see [reading the report](../guides/report.md).", ""]
    for mod_name, attr, spec in table_specs():
        mod = sys.modules[mod_name]
        notes = _comments(mod)
        out += [f"## `{spec.kind}` (version {spec.version})", "", f"`{mod_name}.{attr}`", ""]
        doc = inspect.getdoc(mod) or ""
        first = doc.split("\n\n")[0]
        if first:
            out += [_md(first), ""]
        defaults = dict(spec.defaults)
        out += ["| column | type | nullable | meaning |", "|---|---|---|---|"]
        for f in spec.schema:
            extra = f" (absent in older files: {defaults[f.name]!r})" if f.name in defaults else ""
            out.append(f"| `{f.name}` | {_md(str(f.type))} | {'yes' if f.nullable else 'no'} | "
                       f"{_md(notes.get(f.name, '') + extra)} |")
        out.append("")
    return "\n".join(out) + "\n"


BUILDERS = {"reference/cli.md": cli_page, "reference/config.md": config_page,
            "reference/policies.md": policies_page, "reference/devices.md": devices_page,
            "reference/models.md": models_page,
            "reference/tables.md": tables_page}


def on_files(files: Files, config: Any) -> Files:
    for uri, build in BUILDERS.items():
        files.append(File.generated(config, uri, content=build()))
    return files
