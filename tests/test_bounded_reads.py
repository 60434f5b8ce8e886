"""Every read bounded (:mod:`advantage.safe_io.read`, :mod:`advantage.chat_template`): any bytes given to the
readers give a value or the project's error, never another exception; and each hostile input found by
attacking the program — an interpolation bomb, a YAML alias bomb in ``hyperparams=FILE``, a Parquet
decompression bomb, 3 GB files read whole, a chat template that allocates 4 GB or loops without end, a
model folder's ``config.json`` nested 100,000 deep, in another encoding or a list — ends in one line
(exit 2 from the command line) within seconds and a bounded amount of memory.

The hostile files that the code before these checks read whole run in a child process with its address
space capped and a timeout, so a regression fails the test instead of exhausting the machine.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advantage.algos.llm.models import model_folder
from advantage.algos.llm.policy import prompt_texts
from advantage.chat_template import RENDER_SECONDS, render_chats
from advantage.cli import main
from advantage.config_sources import YAML_MAX_DEPTH, YAML_MAX_NODES, load_yaml, merge
from advantage.errors import ConfigError
from advantage.safe_io import parquet as safe_parquet
from advantage.safe_io.interpolations import check_interpolations
from advantage.safe_io.parquet import read_parquet_rows
from advantage.safe_io.read import MAX_DEPTH, json_too_deep, load_json, parse_json, parse_yaml, read_bytes

GB3 = 3 << 30
HYPO = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _run(code: str, *, memory: int = 3 << 30, timeout: float = 60.0) -> tuple[int, str, float]:
    """Run ``code`` in a fresh interpreter with its address space capped at ``memory`` bytes: ``(exit
    code, stderr, seconds)``; a run past ``timeout`` is killed and reported as exit code -9."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=cap,
        )
    except subprocess.TimeoutExpired:
        return -9, f"killed after {timeout} s", time.monotonic() - start
    return out.returncode, out.stderr, time.monotonic() - start


def _cli_in_child(args: list[str], **kw) -> tuple[int, str, float]:
    return _run(f"import sys\nfrom advantage.cli import main\nsys.exit(main({args!r}))", **kw)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err[-2000:]
    return lines[0]


# ---- the reader: any bytes give a value or the project's error ----------------------------------------


def _depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text('[]{}"\\ab,:', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text('[]{}"a', max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


@HYPO
@given(value=_JSON, limit=st.integers(0, 12))
def test_json_depth_is_counted_exactly_without_recursion(value, limit):
    """Brackets inside strings (escaped quotes included) do not count; the answer is the true depth."""
    text = json.dumps(value)
    assert json_too_deep(text, limit) == (_depth(value) > limit)


@HYPO
@given(data=st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_as_json_give_a_value_or_a_config_error(data):
    try:
        parse_json(data, "x.json")
    except ConfigError as e:
        assert str(e).startswith("x.json") and "\n" not in str(e)


@HYPO
@given(
    depth=st.integers(0, 3 * MAX_DEPTH),
    opener=st.sampled_from(["[", '{"a":']),
    closed=st.booleans(),
    encoding=st.sampled_from(["utf-8", "utf-16", "utf-32", "latin-1"]),
)
def test_nesting_and_encodings_are_a_value_or_one_error_naming_the_limit(depth, opener, closed, encoding):
    closer = "]" if opener == "[" else "}"
    text = opener * depth + "1" + (closer * depth if closed else "")
    data = text.encode(encoding)
    try:
        value = parse_json(data, "n.json")
    except ConfigError as e:
        msg = str(e)
        assert msg.startswith("n.json") and "\n" not in msg
        if encoding in ("utf-16", "utf-32"):
            assert "not valid UTF-8" in msg
        elif depth > MAX_DEPTH:
            assert "nested deeper than 64 levels" in msg or "malformed JSON" in msg
        return
    assert encoding in ("utf-8", "latin-1") and (closed or depth == 0) and depth <= MAX_DEPTH
    assert _depth(value) == depth


@HYPO
@given(data=st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_as_yaml_give_a_value_or_a_config_error(data):
    try:
        parse_yaml(data, "'x.yaml'", max_nodes=YAML_MAX_NODES, max_depth=YAML_MAX_DEPTH)
    except ConfigError as e:
        assert str(e).startswith("'x.yaml'") and "\n" not in str(e)


_YAML_DOCS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=60,
)


@HYPO
@given(doc=_YAML_DOCS, anchors=st.integers(0, 4), width=st.integers(1, 12))
def test_yaml_with_aliases_loads_as_pyyaml_loads_it_or_is_refused_for_its_expanded_size(doc, anchors, width):
    """Within the limits the value is PyYAML's own; beyond them (aliases of aliases) one error."""
    text = yaml.safe_dump({"doc": doc})
    for i in range(anchors):  # each level holds `width` aliases of the one before
        prev = "doc" if i == 0 else f"l{i - 1}"
        text = text.replace("doc:", "doc: &doc", 1) if i == 0 else text
        text += f"l{i}: &l{i} [{', '.join(['*' + prev] * width)}]\n"
    try:
        value = parse_yaml(text, "'a.yaml'", max_nodes=2000, max_depth=YAML_MAX_DEPTH)
    except ConfigError as e:
        assert "more than 2000 values" in str(e) or "nested deeper" in str(e)
        return
    assert value == yaml.safe_load(text)


@HYPO
@given(size=st.integers(0, 5000), limit=st.integers(0, 5000))
def test_a_file_is_read_only_within_its_limit(tmp_path, size, limit):
    path = tmp_path / f"f{size}"
    path.write_bytes(b"x" * size)
    if size <= limit:
        assert read_bytes(path, limit) == b"x" * size
    else:
        with pytest.raises(ConfigError, match=rf"is over {limit} bytes \(it is {size} bytes\)"):
            read_bytes(path, limit)


def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        read_bytes(fifo, 100)  # no writer: opening it for reading would block without O_NONBLOCK
    with pytest.raises(ConfigError, match="not a regular file"):
        read_bytes("/dev/zero", 100)
    with pytest.raises(ConfigError, match="is a folder"):
        read_bytes(tmp_path, 100)
    with pytest.raises(ConfigError, match="no such file"):
        read_bytes(tmp_path / "missing", 100)


@HYPO
@given(
    data=st.binary(max_size=300)
    | st.lists(_JSON, max_size=4).map(lambda rows: "\n".join(json.dumps(r) for r in rows).encode()),
    suffix=st.sampled_from([".jsonl", ".json", ".parquet"]),
)
def test_any_bytes_as_a_dataset_give_rows_or_a_config_error(tmp_path, data, suffix):
    from advantage.envs.text.datasets import _read_rows

    path = tmp_path / f"d{suffix}"
    path.write_bytes(data)
    try:
        _, rows = _read_rows(path, "dataset")
    except ConfigError as e:
        assert str(path) in str(e) and "\n" not in str(e)
        return
    assert isinstance(rows, list) and rows


_KEYS = st.sampled_from(["a", "b", "c", "d"])


@HYPO
@given(
    tree=st.dictionaries(
        _KEYS,
        st.lists(_KEYS.map(lambda k: "${" + k + "}") | st.text("xy", max_size=3), max_size=6).map("".join),
        max_size=4,
    )
)
def test_interpolations_resolve_as_before_or_are_refused_before_resolving(tree):
    """Any tree of references: either the count says it is small and OmegaConf resolves it, or one error
    (never a hang: the count is made before anything resolves)."""
    try:
        check_interpolations(tree)
    except ConfigError as e:
        assert "refused before resolving it" in str(e)
        return
    try:
        merge(tree)
    except ConfigError as e:  # a cycle or a missing key, as OmegaConf says
        assert "cannot resolve config" in str(e)


# ---- interpolation bomb ----------------------------------------------------------------------------------


def _bomb(levels: int, refs: int, ref: str = "${trainer.l%d}") -> str:
    lines = ["algo: ppo", "env:", f"  id: {ref % levels}", "trainer:", "  l0: aaaaaaaa"]
    lines += [f"  l{i}: " + (ref % (i - 1)) * refs for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "levels, refs, ref",
    [(4, 6, "${trainer.l%d}"), (7, 4, "${trainer.l%d}"), (5, 5, "${oc.select:trainer.l%d}")],
)
def test_an_interpolation_bomb_is_refused_before_it_resolves(tmp_path, levels, refs, ref):
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(levels, refs, ref))
    assert path.stat().st_size < 700
    code, err, seconds = _cli_in_child(["train", "--config", str(path)], timeout=30)
    line = _one_line(err)
    assert code == 2 and seconds < 5, (code, seconds)
    assert "interpolations take more than 1000 resolutions" in line and "refused before resolving" in line


def test_interpolations_that_count_cannot_bound_are_refused_and_ordinary_ones_resolve(monkeypatch):
    monkeypatch.setenv("ADV_TEST_VALUE", "0.5")
    tree = {"a": {"b": 1, "c": "${.b}", "d": "${..e}", "f": "${oc.decode:${oc.env:ADV_TEST_VALUE}}"}, "e": 2}
    assert merge(tree) == {"a": {"b": 1, "c": 1, "d": 2, "f": 0.5}, "e": 2}
    with pytest.raises(ConfigError, match="a key built from another interpolation"):
        merge({"a": {"x": 1}, "b": "x", "c": "${a.${b}}"})
    with pytest.raises(ConfigError, match=r"oc.decode:…\} of a config value"):
        merge({"a": "\\${b}\\${b}", "b": "x", "c": "${oc.decode:${a}}"})
    with pytest.raises(ConfigError, match="expand to more than 1048576 characters"):
        merge({"a": "x" * 300_000, "b": "${a}${a}${a}${a}"})


# ---- YAML: hyperparams=FILE and --config ------------------------------------------------------------------


def _hyperparams_bomb() -> str:
    levels = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    return levels + "CartPole-v1:\n  source: x\n  model.hidden_sizes: *i\n"


def test_a_hyperparams_file_alias_bomb_is_refused_before_it_expands(tmp_path):
    path = tmp_path / "hp.yaml"
    path.write_text(_hyperparams_bomb())
    assert path.stat().st_size < 900
    code, err, seconds = _cli_in_child(
        ["train", "ppo", "env.id=CartPole-v1", f"hyperparams={path}", "trainer.total_steps=1"], timeout=30
    )
    line = _one_line(err)
    assert code == 2 and seconds < 5, (code, seconds, line)
    assert line == (
        f"error: hyperparams file {str(path)!r}: more than 100000 values once its aliases are expanded (an "
        "alias bomb?); refused before expanding it"
    )


@pytest.mark.parametrize(
    "content, message",
    [
        (b"CartPole-v1:\n  source: \xff\n", r"hp.yaml': not valid UTF-8 \(byte 23\)"),
        (b"a: " + b"[" * 100 + b"]" * 100, "nested deeper than 64 levels"),
        (b"x: 1\n" * 300_000, "is over 1048576 bytes"),
    ],
)
def test_a_hyperparams_file_is_bounded_as_a_config_file_is(tmp_path, content, message):
    path = tmp_path / "hp.yaml"
    path.write_bytes(content)
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError, match=message):
        resolve_config("ppo", None, {"hyperparams": str(path), "env.id": "CartPole-v1"})


def test_deep_flow_yaml_is_refused_at_once(tmp_path):
    """100,000 ``[`` took PyYAML's pure-Python scanner two minutes; libyaml stops at its own limit."""
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 100_000)
    code, err, seconds = _cli_in_child(["train", "--config", str(path)], timeout=20)
    line = _one_line(err)
    assert code == 2 and seconds < 5 and "deep.yaml" in line, (code, seconds, line)


# ---- 3 GB files (sparse: they take no disk) ------------------------------------------------------------


def _sparse(path: Path, size: int = GB3) -> Path:
    with open(path, "wb") as f:
        os.truncate(f.fileno(), size)
    return path


def test_a_3gb_config_file_is_refused_before_it_is_read(tmp_path):
    big = _sparse(tmp_path / "big.yaml")
    code, err, seconds = _cli_in_child(["train", "--config", str(big)], memory=1 << 30, timeout=60)
    line = _one_line(err)
    assert code == 2 and seconds < 5
    assert "big.yaml' is over 1048576 bytes (it is 3221225472 bytes)" in line


def test_a_run_folder_whose_config_is_3gb_is_refused_by_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _sparse(run / "config.yaml")
    code, err, seconds = _cli_in_child(["resume", str(run)], memory=1 << 30, timeout=60)
    line = _one_line(err)
    assert code == 2 and seconds < 5 and "config.yaml" in line and "1048576" in line, line


def test_a_3gb_json_dataset_is_refused_before_it_is_read(tmp_path):
    big = _sparse(tmp_path / "big.json")
    code, err, seconds = _run(
        f"""
        import sys
        from advantage.errors import ConfigError
        from advantage.envs.text.datasets import load_examples
        try:
            load_examples({str(big)!r})
        except ConfigError as e:
            print(f"error: {{e}}", file=sys.stderr)
            sys.exit(2)
        """,
        memory=1 << 30,
        timeout=60,
    )
    line = _one_line(err)
    assert code == 2 and seconds < 5
    assert "big.json is over 536870912 bytes (it is 3221225472 bytes)" in line and ".jsonl" in line


@pytest.mark.parametrize("content", [b'algo: ppo\nenv:\n  id: "\xff\xfe"\n', b"\xc3"])
def test_invalid_utf8_in_a_config_or_a_runs_config_is_one_line(tmp_path, capsys, content):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    assert main(["train", "--config", str(path)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "bad.yaml': not valid UTF-8 (byte" in line
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_bytes(content)
    for command in (["resume", str(run)], ["eval", str(run)]):
        assert main(command) == 2
        line = _one_line(capsys.readouterr().err)
        assert "config.yaml': not valid UTF-8 (byte" in line


# ---- Parquet --------------------------------------------------------------------------------------------


def _parquet_bomb(path: Path, groups: int, value_bytes: int) -> Path:
    """``groups`` row groups of one row whose prompt is ``value_bytes`` of one letter: a few KB on disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("prompt", pa.string()), ("answer", pa.string())])
    table = pa.table({"prompt": ["a" * value_bytes], "answer": ["1"]}, schema=schema)
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for _ in range(groups):
            writer.write_table(table)
    return path


def test_a_parquet_decompression_bomb_is_refused_from_its_footer_before_decoding(tmp_path, monkeypatch):
    """The finding's file (126 KB, 2.8 GB decoded) scaled down: 32 x 8 MiB against a 128 MiB limit."""
    import pyarrow.parquet as pq

    from advantage.envs.text.datasets import load_examples

    path = _parquet_bomb(tmp_path / "bomb.parquet", 32, 8 << 20)
    assert path.stat().st_size < 200_000
    monkeypatch.setattr(safe_parquet, "PARQUET_MAX_DECODED", 128 << 20)
    decoded = []
    original = pq.ParquetFile.iter_batches
    monkeypatch.setattr(
        pq.ParquetFile, "iter_batches", lambda self, *a, **k: decoded.append(1) or original(self, *a, **k)
    )
    tracemalloc.start()
    try:
        with pytest.raises(
            ConfigError, match=r"bomb.parquet: its values decode to \d+ bytes .* over the limit"
        ):
            load_examples(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded == [] and peak < 16 << 20


def test_a_parquet_footer_that_understates_its_sizes_is_stopped_by_the_batches(tmp_path, monkeypatch):
    """The footer is made to claim one byte per column chunk: the decoded batches are counted anyway."""
    import pyarrow.parquet as pq

    path = _parquet_bomb(tmp_path / "liar.parquet", 8, 3 << 20)

    class Lying:
        def __init__(self, md):
            self.md, self.num_row_groups = md, md.num_row_groups

        def row_group(self, g):
            group = self.md.row_group(g)

            class Group:
                num_columns, num_rows, total_byte_size = group.num_columns, group.num_rows, 1

                def column(self, c):
                    return type("Column", (), {"total_uncompressed_size": 1})()

            return Group()

    monkeypatch.setattr(pq.ParquetFile, "metadata", property(lambda self: Lying(self.reader.metadata)))
    with pytest.raises(ConfigError, match="more than 10485760 bytes .more than its footer declares"):
        read_parquet_rows(path, "liar.parquet", max_value_bytes=4 << 20, max_decoded=10 << 20)
    with pytest.raises(ConfigError, match=r"column 'prompt' holds a value of 3145728 bytes in rows 0-"):
        read_parquet_rows(path, "liar.parquet", max_value_bytes=1 << 20)


def test_parquet_rows_read_in_batches_are_the_rows_of_the_table(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": [{"role": "user", "content": f"q{i}" * i}], "n": i} for i in range(300)]
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=70)
    assert read_parquet_rows(path, max_value_bytes=1 << 20) == pq.read_table(path).to_pylist() == rows
    longest = max(len(f"q{i}" * i) for i in range(300))
    with pytest.raises(ConfigError, match=f"column 'prompt' holds a value of {longest} bytes in rows 0-"):
        read_parquet_rows(path, max_value_bytes=longest - 1)  # inside the list of structs
    assert read_parquet_rows(path, max_value_bytes=longest) == rows


# ---- model folders and chat templates ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    from advantage.lm.tiny_folder import save_tiny_folder

    return save_tiny_folder(tmp_path_factory.mktemp("model") / "tiny", ["what is 1+1? 2", "2+2 is 4"] * 20)


def _copy(folder: Path, dest: Path) -> Path:
    shutil.copytree(folder, dest)
    return dest


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("config.json", b"[" * 100_000, "config.json': malformed JSON .nested deeper than 64 levels"),
        ("config.json", b'{"model_type": "\xff"}', r"config.json': not valid UTF-8 \(byte 16\)"),
        ("config.json", b"[1, 2]", "config.json' must hold a JSON object, got a JSON array"),
        ("tokenizer.json", b"[" * 100_000, "tokenizer.json': malformed JSON .nested deeper than 64 levels"),
        ("tokenizer.json", b'{"a": "\xff"}', r"tokenizer.json': not valid UTF-8 \(byte 7\)"),
        ("tokenizer.json", b'{"model": ', r"tokenizer.json':1: malformed JSON .Expecting value"),
        ("tokenizer_config.json", b'{"x": 1}' + b" " * 10, None),
        ("merges.txt", b"#version: 0.2\n\xc3\n", r"merges.txt': not valid UTF-8 \(byte 14\)"),
    ],
)
def test_a_model_folders_json_files_are_checked_before_transformers_reads_them(
    tiny_folder, tmp_path, name, content, message
):
    """Each of these was a traceback out of transformers (RecursionError, UnicodeDecodeError,
    JSONDecodeError, AttributeError on a list)."""
    folder = _copy(tiny_folder, tmp_path / "m")
    (folder / name).write_bytes(content)
    if message is None:
        assert model_folder(str(folder)) == folder
        return
    with pytest.raises(ConfigError, match=message):
        model_folder(str(folder))


def test_model_folder_files_over_their_limits_are_refused_before_they_are_read(tiny_folder, tmp_path):
    folder = _copy(tiny_folder, tmp_path / "m")
    _sparse(folder / "tokenizer.json")
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match="tokenizer.json' is over 536870912 bytes"):
            model_folder(str(folder))
        assert tracemalloc.get_traced_memory()[1] < 16 << 20
    finally:
        tracemalloc.stop()
    (folder / "tokenizer.json").unlink()
    shutil.copy(tiny_folder / "tokenizer.json", folder / "tokenizer.json")
    _sparse(folder / "generation_config.json")
    with pytest.raises(ConfigError, match="generation_config.json' is over 67108864 bytes"):
        model_folder(str(folder))
    assert model_folder(str(tiny_folder)) == tiny_folder
    assert load_json(tiny_folder / "config.json", 1 << 20, expect=dict)["model_type"] == "qwen2"


def _tokenizer(template: str | None = None):
    from advantage.lm.model import build_char_tokenizer

    tok = build_char_tokenizer("abcdefghijklmnopqrstuvwxyz +=?0123456789")
    if template is not None:
        tok.chat_template = template
    return tok


TEMPLATES = {
    "llama3": (
        "{{ bos_token }}{% for m in messages %}{% if loop.first and m['role'] != 'system' %}"
        "<|start_header_id|>system<|end_header_id|>\n\nYou help.<|eot_id|>{% endif %}"
        "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
        "{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    ),
    "features": (
        "{% set ns = namespace(n=0, seen=dict()) %}\n"
        "{%- for m in messages %}\n"
        "  {%- if m.role == 'tool' %}{% continue %}{% endif %}\n"
        "  {%- set ns.n = ns.n + 1 %}\n"
        "  {%- if m.role not in ['user', 'assistant', 'system'] %}\n"
        "    {{- raise_exception('bad role') }}\n"
        "  {%- endif %}\n"
        "  {%- generation %}[{{ ns.n }}:{{ m | tojson(indent=1) }}]{% endgeneration %}\n"
        "  {%- if ns.n > 5 %}{% break %}{% endif %}\n"
        "{%- endfor %}\n"
        "{{ eos_token }}{% if add_generation_prompt %}>>{% endif %}"
    ),
}


_TOKENIZERS: dict = {}


@pytest.mark.parametrize("name", ["own", "chatml", *TEMPLATES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    contents=st.lists(st.text(st.characters(codec="utf-8"), max_size=40), min_size=1, max_size=4),
    generation=st.booleans(),
)
def test_a_template_renders_as_transformers_renders_it(tiny_folder, name, contents, generation):
    from transformers import AutoTokenizer

    if name not in _TOKENIZERS:
        chatml = name == "chatml"
        _TOKENIZERS[name] = (
            AutoTokenizer.from_pretrained(tiny_folder) if chatml else _tokenizer(TEMPLATES.get(name))
        )
    tok = _TOKENIZERS[name]
    roles = ["system", "user", "assistant", "user"]
    chat = [{"role": roles[i % 4], "content": c} for i, c in enumerate(contents)]
    expected = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation)
    assert render_chats(tok, [chat], add_generation_prompt=generation) == [expected]


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{'a'*4000000000}}", "rendering needed more than 512 MiB of memory; refused"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            f"rendering did not finish in {RENDER_SECONDS} s",
        ),
        (
            "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
            "its output is over 16777216 characters",
        ),
        ("{{ raise_exception('roles must alternate') }}", "fails: TemplateError: roles must alternate"),
        ("{{ ().__class__.__base__.__subclasses__() }}", "fails: "),
    ],
)
def test_a_hostile_chat_template_is_one_error_in_bounded_time_and_memory(template, message):
    tok = _tokenizer(template)
    start = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=message):
            prompt_texts(tok, ["hello"], True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - start < RENDER_SECONDS + 4 and peak < 64 << 20
    # the next render starts a fresh renderer
    assert prompt_texts(_tokenizer(), ["hi"], True) == ["<|user|>hi<eos><|assistant|>"]


def test_sft_with_a_model_whose_template_loops_exits_2_in_seconds(tiny_folder, tmp_path, capfd):
    folder = _copy(tiny_folder, tmp_path / "loop")
    for f in folder.glob("chat_template*"):
        f.unlink()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    )
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "split": ["train", "validation", "test"][i % 3]}
            for i in range(30)]  # fmt: skip
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    start = time.monotonic()

    def hung(signum, frame):
        raise TimeoutError("the render was not stopped")  # the loop would otherwise run for hours

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        code = main(
            ["train", "sft", f"model.path={folder}", "data.task=dataset", f"data.path={data}",
             "data.chat_template=true", "trainer.eval_episodes=4", f"trainer.run_dir={tmp_path / 'run'}"]
        )  # fmt: skip
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    line = _one_line(capfd.readouterr().err)
    assert code == 2 and time.monotonic() - start < 30
    assert "loop" in line and f"did not finish in {RENDER_SECONDS} s" in line
    assert not (tmp_path / "run").exists()


def test_a_reward_models_meta_file_is_read_within_bounds(tiny_folder, tmp_path):
    from advantage.algos.llm.reward_models import HEAD_FILE, META_FILE, load_reward_model

    folder = _copy(tiny_folder, tmp_path / "rm")
    (folder / HEAD_FILE).write_bytes(b"")
    (folder / META_FILE).write_bytes(b"[" * 100_000)
    with pytest.raises(ConfigError, match="reward_model.json': malformed JSON .nested deeper than 64 levels"):
        load_reward_model(folder)
    (folder / META_FILE).write_bytes(b"[]")
    with pytest.raises(ConfigError, match="reward_model.json' must hold a JSON object, got a JSON array"):
        load_reward_model(folder)


def test_config_files_still_load_as_before(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("algo: sarsa\nbase: &b {gamma: 0.8}\nalgorithm:\n  <<: *b\nenv:\n  id: CliffWalking-v1\n")
    assert load_yaml(f) == yaml.safe_load(f.read_text())


def test_a_render_interrupted_while_waiting_never_gives_its_answer_to_the_next(monkeypatch):
    """Ctrl-C while the renderer works: the next render must not read the interrupted one's answer."""
    from advantage import chat_template

    tok = _tokenizer()
    original, calls = chat_template._Child._read, []

    def interrupted(self, n, deadline):
        if not calls:
            calls.append(1)
            time.sleep(0.3)  # the child's answer is in the pipe now
            raise KeyboardInterrupt
        return original(self, n, deadline)

    monkeypatch.setattr(chat_template._Child, "_read", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prompt_texts(tok, ["first question"], True)
    second = prompt_texts(tok, ["second question"], True)
    assert second == ["<|user|>second question<eos><|assistant|>"]


def test_a_state_file_of_3gb_is_refused_whatever_the_manifest_says(tmp_path):
    """The manifest names the size, and the file has it: still not read (a state file is small)."""
    import torch

    from advantage.checkpoint import save_checkpoint

    folder = save_checkpoint(tmp_path / "checkpoints", 3, {"w": torch.ones(2)}, {"step": 3})
    _sparse(folder / "state.json")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["state.json"]["bytes"] = GB3
    (folder / "manifest.json").write_text(json.dumps(manifest))
    code, err, seconds = _run(
        f"""
        import sys
        from advantage.checkpoint import load_checkpoint
        from advantage.errors import CheckpointError
        try:
            load_checkpoint({str(tmp_path / "checkpoints")!r})
        except CheckpointError as e:
            print(f"error: {{e}}", file=sys.stderr)
            sys.exit(2)
        """,
        memory=1 << 30,
        timeout=60,
    )
    line = _one_line(err)
    assert code == 2 and seconds < 10 and "state.json: 3221225472 bytes, over the 268435456" in line, line
