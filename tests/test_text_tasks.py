"""Text tasks: deterministic disjoint splits, targets that verify, adversarial completions rejected as
documented in advantage.envs.text.core, countdown parsed without executing, datasets from disk, math."""

from __future__ import annotations

import json
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from advantage.envs.text import TASKS, Example, Task, evaluate_expression, make_task
from advantage.errors import ConfigError

GENERATED = [
    ("addition", {}),
    ("addition", {"digits": 2, "answer_format": "tagged"}),
    ("multiplication", {}),
    ("multiplication", {"digits": 3, "answer_format": "tagged"}),
    ("countdown", {}),
    ("countdown", {"numbers": 4, "answer_format": "tagged"}),
    ("reverse", {}),
    ("reverse", {"length": 7, "answer_format": "tagged"}),
    ("sort", {}),
    ("sort", {"symbols": "letters", "answer_format": "tagged"}),
]


def _ids(params):
    return [f"{name}-{'-'.join(map(str, opts.values())) or 'default'}" for name, opts in params]


@pytest.mark.parametrize(("name", "opts"), GENERATED, ids=_ids(GENERATED))
def test_targets_verify_and_fit_the_alphabet(name, opts):
    task = make_task(name, **opts)
    assert isinstance(task, Task)
    examples = task.examples("train", 200, seed=0)
    assert len({ex.prompt for ex in examples}) == 200
    for ex in examples:
        reward = task.verify(ex.target, ex)
        assert (reward.score, reward.correct, reward.format_ok, reward.reason) == (1.0, True, True, "correct")
        assert set(ex.prompt + ex.target) <= set(task.alphabet), ex
        assert reward.answer is not None
    if opts.get("answer_format") == "tagged":
        assert task.special_tokens == ("<answer>", "</answer>")
        assert all(ex.target == f"<answer>{ex.answer}</answer>" for ex in examples)
    else:
        assert task.special_tokens == ()


@pytest.mark.parametrize(("name", "opts"), GENERATED, ids=_ids(GENERATED))
def test_generation_is_deterministic_and_splits_are_disjoint(name, opts):
    task = make_task(name, **opts)
    a = task.examples("validation", 50, seed=1)
    assert a == task.examples("validation", 50, seed=1)
    assert a[:20] == task.examples("validation", 20, seed=1)  # a smaller n is a prefix
    assert a != task.examples("validation", 50, seed=2)
    prompts = {
        s: {ex.prompt for ex in task.examples(s, 150, seed=s2)}
        for s, s2 in [("train", 0), ("validation", 1), ("test", 2)]
    }
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]


def test_splits_are_disjoint_in_an_exhausted_small_space():
    task = make_task("addition", digits=1)  # 100 ordered pairs in all
    sizes = {}
    keys = {}
    for split in ("train", "validation", "test"):
        with pytest.raises(ConfigError, match=f"has (\\d+) distinct {split} problems .* asked for n=101"):
            task.examples(split, 101, seed=0)
        for n in range(101):
            try:
                task.examples(split, n, seed=0)
            except ConfigError:
                sizes[split] = n - 1
                break
        exs = task.examples(split, sizes[split], seed=0)
        keys[split] = {tuple(sorted((ex.meta["a"], ex.meta["b"]))) for ex in exs}
    assert sum(sizes.values()) == 100
    # a+b and b+a share a split: the unordered pairs are disjoint too
    assert not keys["train"] & keys["validation"] and not keys["train"] & keys["test"]
    assert not keys["validation"] & keys["test"]


def test_unknown_split_and_bad_n():
    task = make_task("addition")
    with pytest.raises(ConfigError, match="split must be one of train, validation, test, got 'dev'"):
        task.examples("dev", 5, seed=0)
    with pytest.raises(ConfigError, match="n must be a non-negative int, got -1"):
        task.examples("train", -1, seed=0)
    with pytest.raises(ConfigError, match="found only .* distinct test problems"):
        make_task("countdown", numbers=2, max_number=2).examples("test", 50, seed=0)


def test_make_task_errors():
    with pytest.raises(
        ConfigError, match="data.task must be one of .*got 'additon'; did you mean 'addition'"
    ):
        make_task("additon")
    with pytest.raises(
        ConfigError, match="unknown option data.digit for task 'addition'; did you mean data.digits"
    ):
        make_task("addition", digit=3)
    with pytest.raises(ConfigError, match="allowed: digits, answer_format, format_reward"):
        make_task("addition", length=3)
    with pytest.raises(ConfigError, match="data.digits must be an int in \\[1, 18\\], got 0"):
        make_task("addition", digits=0)
    with pytest.raises(ConfigError, match="data.answer_format must be one of plain, tagged, got 'xml'"):
        make_task("reverse", answer_format="xml")
    with pytest.raises(ConfigError, match="data.format_reward must be a number in \\[0, 1\\], got 1.5"):
        make_task("sort", format_reward=1.5)
    with pytest.raises(ConfigError, match="2 config problems"):
        make_task("countdown", numbers=1, max_number=0)
    with pytest.raises(ConfigError, match="data.path is required"):
        make_task("math")
    assert set(TASKS) == {
        "addition",
        "multiplication",
        "countdown",
        "reverse",
        "sort",
        "dataset",
        "math",
        "code",
    }


def _ex(task, prompt_prefix):
    return next(ex for ex in task.examples("train", 200, seed=0) if ex.prompt.startswith(prompt_prefix))


def test_plain_format_rules():
    task = make_task("addition")
    ex = Example("123+45=", "168", "168", {"a": 123, "b": 45, "op": "+"})
    assert task.verify("  168\n", ex).correct
    for completion, reason, format_ok in [
        ("", "empty completion", False),
        ("   ", "empty completion", False),
        ("169", "wrong answer '169' (expected 168)", True),
        ("0168", "non-canonical integer '0168' (leading zeros)", True),
        ("168 is the answer", "extra text", False),
        ("The answer is 168", "extra text", False),
        ("168\n168", "extra text", False),
        ("<answer>168</answer>", "extra text", False),
    ]:
        r = task.verify(completion, ex)
        assert (r.score, r.correct, r.format_ok) == (0.0, False, format_ok), completion
        assert r.reason.startswith(reason), (completion, r.reason)
    assert task.verify("169", ex).answer == "169"
    assert task.verify("168 is it", ex).answer is None


def test_tagged_format_rules():
    task = make_task("addition", answer_format="tagged")
    ex = Example("123+45=", "168", "<answer>168</answer>")
    ok = task.verify("123+45: 3+5=8, 2+4=6, 1 → 168. <answer> 168 </answer> done", ex)
    assert (ok.score, ok.correct, ok.format_ok, ok.answer) == (1.0, True, True, "168")
    for completion, reason, format_ok in [
        ("168", "no <answer> tag", False),
        ("the answer is 168", "no <answer> tag", False),  # right answer, but only in the reasoning
        ("168 <answer>169</answer>", "wrong answer '169' (expected 168)", True),  # answer outside the tag
        ("<answer>168</answer><answer>168</answer>", "2 answer tags", False),
        ("<answer>1</answer> <answer>168</answer> <answer>2</answer>", "3 answer tags", False),
        ("<answer>168", "unbalanced answer tags", False),
        ("</answer>168<answer>", "unbalanced answer tags", False),
        ("<answer>168 extra</answer>", "wrong answer", True),
        ("<answer></answer>", "wrong answer '' (expected 168)", True),
        ("", "empty completion", False),
    ]:
        r = task.verify(completion, ex)
        assert (r.score, r.correct, r.format_ok) == (0.0, False, format_ok), completion
        assert r.reason.startswith(reason), (completion, r.reason)


def test_format_reward_arithmetic():
    ex = Example("123+45=", "168", "<answer>168</answer>")
    task = make_task("addition", answer_format="tagged", format_reward=0.2)
    assert task.verify("<answer>168</answer>", ex).score == pytest.approx(1.0)
    assert task.verify("<answer>169</answer>", ex).score == pytest.approx(0.2)  # format ok, wrong
    assert task.verify("168", ex).score == 0.0  # no tag: neither
    assert task.verify("<answer>168</answer><answer>168</answer>", ex).score == 0.0
    plain = make_task("reverse", format_reward=0.5)
    ex2 = Example("reverse abc=", "cba", "cba")
    assert plain.verify("cba", ex2).score == 1.0
    assert plain.verify("abc", ex2).score == pytest.approx(0.5)
    assert plain.verify("cba!", ex2).score == 0.0


def test_sequence_tasks_compare_exact_strings():
    task = make_task("sort", symbols="letters")
    ex = Example("sort dcba=", "abcd", "abcd")
    assert task.verify("abcd", ex).correct
    assert task.verify("ABCD", ex).reason.startswith("extra text")
    assert task.verify("abdc", ex).reason == "wrong answer 'abdc' (expected abcd)"


COUNTDOWN = Example("use 3 5 7 to make 22:", "3*5+7", "3*5+7", {"numbers": (3, 5, 7), "target": 22})


@pytest.mark.parametrize(
    ("completion", "correct", "reason"),
    [
        ("3*5+7", True, "correct"),
        (" 7 + 5 * 3 ", True, "correct"),
        ("(7+5*3)", True, "correct"),
        ("5*(7-3)+3", False, "number 3 used 2 times (given 1)"),
        ("3*5+7+0", False, "number 0 not given"),
        ("3*5+8", False, "number 8 not given"),
        ("5*7", False, "number 3 not used"),
        ("3*5+7-3", False, "number 3 used 2 times"),
        ("3+5+7", False, "wrong value 15 (expected 22)"),
        ("7/3+5", False, "wrong value 22/3 (expected 22)"),
        ("3**5+7", False, "disallowed syntax Pow"),
        ("3//5+7", False, "disallowed syntax FloorDiv"),
        ("-3+5*7", False, "disallowed syntax USub"),
        ("(3)(5)+7", False, "disallowed syntax Call"),
        ("3*5+", False, "not a valid expression"),
        ("3 5 7", False, "not a valid expression"),
        ("07+3*5", False, "not a valid expression"),
        ("(" * 150 + "3*5+7" + ")" * 150, False, "expression longer than 200 characters"),
        ("3*5+7=22", False, "extra text"),
        ("__import__('os').system('touch /tmp/pwned')", False, "extra text"),
    ],
)
def test_countdown_verifier(completion, correct, reason):
    task = make_task("countdown")
    r = task.verify(completion, COUNTDOWN)
    assert r.correct is correct
    assert r.reason.startswith(reason), r.reason


def test_countdown_division_by_zero_and_duplicates():
    ex = Example("use 3 5 5 to make 13:", "3+5+5", "3+5+5", {"numbers": (3, 5, 5), "target": 13})
    task = make_task("countdown")
    assert task.verify("3/(5-5)", ex).reason == "division by zero"
    assert task.verify("(5-3)/(5-3)", ex).reason.startswith("number 3 used 2 times")
    assert task.verify("5/5*3", ex).reason == "wrong value 3 (expected 13)"
    assert task.verify("5+3+5", ex).correct  # a number given twice is used twice


def test_countdown_never_executes_code(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    hostile = [
        f"__import__('os').system('touch {marker}')",
        "().__class__.__bases__[0].__subclasses__()",
        "open('x')",
        "x",
        "(lambda: 1)()",
        "[3, 5, 7]",
        "3 if 1 else 5",
        "True+5*3+7",
    ]
    task = make_task("countdown", answer_format="tagged")
    for code in hostile:
        value, reason = evaluate_expression(code, (3, 5, 7))
        assert value is None and "not allowed" in reason, (code, reason)
        r = task.verify(f"<answer>{code}</answer>", COUNTDOWN)
        assert r.score == 0.0 and r.format_ok and "not allowed" in r.reason
    assert not marker.exists()


def test_countdown_tagged_rules():
    task = make_task("countdown", answer_format="tagged")
    assert task.verify("3*5=15, 15+7=22 <answer>3*5+7</answer>", COUNTDOWN).correct
    assert task.verify("3*5+7", COUNTDOWN).reason == "no <answer> tag"
    assert task.verify("<answer>3*5+7</answer><answer>3*5+7</answer>", COUNTDOWN).reason == "2 answer tags"
    assert task.verify("<answer> 3 * 5 + 7 </answer>", COUNTDOWN).answer == "3*5+7"


def test_countdown_problems_are_solvable_by_construction():
    task = make_task("countdown", numbers=5, max_number=50)
    for ex in task.examples("test", 100, seed=4):
        value, reason = evaluate_expression(ex.target, ex.meta["numbers"])
        assert reason == "ok" and value == ex.meta["target"] and value > 0
        assert sorted(ex.meta["numbers"]) == sorted(int(t) for t in ex.prompt.split()[1:6])


# ---------------------------------------------------------------- datasets from disk


ROWS = [
    {"prompt": "2+2=", "answer": 4, "source": "a"},
    {"prompt": "5+5=", "answer": 10, "source": "b"},
    {"prompt": "3*3=", "answer": 9, "source": "c"},
]


def _write(path, rows, fmt):
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_load_examples_formats(tmp_path, fmt):
    from advantage.envs.text import load_examples

    path = _write(tmp_path / f"d.{fmt}", ROWS, fmt)
    exs = load_examples(path)
    assert [ex.answer for ex in exs] == ["4", "10", "9"]  # int answers become strings
    assert exs[0].prompt == "2+2=" and exs[0].target == "4" and dict(exs[0].meta) == {"source": "a"}
    exs = load_examples(path, prompt_key="prompt", answer_key="answer", target_key="source")
    assert [ex.target for ex in exs] == ["a", "b", "c"]


def test_load_examples_errors(tmp_path):
    from advantage.envs.text import load_examples

    with pytest.raises(ConfigError, match="dataset file '.*missing.jsonl' not found"):
        load_examples(tmp_path / "missing.jsonl")
    (tmp_path / "d.csv").write_text("prompt,answer\n")
    with pytest.raises(ConfigError, match="unsupported suffix '.csv'; allowed: .jsonl, .json, .parquet"):
        load_examples(tmp_path / "d.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "answer": "b"}\n{"prompt": "a", \n')
    with pytest.raises(ConfigError, match="bad.jsonl:2: malformed JSON line"):
        load_examples(bad)
    _write(tmp_path / "nocol.json", [ROWS[0], {"question": "q", "answer": "1"}], "json")
    with pytest.raises(
        ConfigError, match="nocol.json: row 1 has no column 'prompt' \\(columns present: question, answer\\)"
    ):
        load_examples(tmp_path / "nocol.json")
    _write(tmp_path / "noans.parquet", [{"prompt": "q", "solution": "1"}], "parquet")
    with pytest.raises(
        ConfigError, match="row 0 has no column 'answer' \\(columns present: prompt, solution\\)"
    ):
        load_examples(tmp_path / "noans.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="dataset '.*empty.jsonl' is empty"):
        load_examples(tmp_path / "empty.jsonl")
    _write(tmp_path / "obj.json", {"prompt": "q"}, "json")
    with pytest.raises(ConfigError, match="must be a list of objects, got dict"):
        load_examples(tmp_path / "obj.json")
    _write(tmp_path / "blank.jsonl", [{"prompt": "q", "answer": " "}], "jsonl")
    with pytest.raises(ConfigError, match="blank.jsonl: row 0 column 'answer' is empty"):
        load_examples(tmp_path / "blank.jsonl")
    _write(tmp_path / "null.jsonl", [{"prompt": "q", "answer": None}], "jsonl")
    with pytest.raises(ConfigError, match="row 0 column 'answer' must be a string or a number, got None"):
        load_examples(tmp_path / "null.jsonl")
    (tmp_path / "corrupt.parquet").write_bytes(b"not parquet")
    with pytest.raises(ConfigError, match="corrupt.parquet: not a readable parquet file"):
        load_examples(tmp_path / "corrupt.parquet")


def test_dataset_task_hash_splits_and_exact_match(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": f"a{i}"} for i in range(400)]
    path = _write(tmp_path / "d.jsonl", rows, "jsonl")
    task = make_task("dataset", path=str(path), answer_format="tagged")
    sizes = task.split_sizes
    assert sum(sizes.values()) == 400 and sizes["train"] > sizes["validation"] > 0 and sizes["test"] > 0
    splits = {s: {ex.prompt for ex in task.examples(s, sizes[s], seed=0)} for s in sizes}
    assert not splits["train"] & splits["test"] and not splits["validation"] & splits["test"]
    assert task.examples("train", 10, seed=3) == task.examples("train", 10, seed=3)
    with pytest.raises(ConfigError, match=f"has {sizes['test']} test examples, asked for n=400"):
        task.examples("test", 400, seed=0)
    ex = task.examples("train", 1, seed=0)[0]
    assert ex.target == f"<answer>{ex.answer}</answer>" and task.verify(ex.target, ex).correct
    assert task.verify(ex.answer, ex).reason == "no <answer> tag"
    plain = make_task("dataset", path=str(path))
    assert plain.verify(f" {ex.answer} ", ex).correct
    assert plain.verify(f"it is {ex.answer}", ex).reason.startswith("extra text")
    assert plain.verify("a-1", ex).reason.startswith("wrong answer 'a-1'")
    assert plain.verify(f"{ex.answer}0", ex).reason.startswith("wrong answer")  # "a10" is not "a1"+text


def test_dataset_split_column(tmp_path):
    rows = [
        {"prompt": f"q{i}", "answer": "1", "split": s} for i, s in enumerate(["train", "val", "test", "test"])
    ]
    task = make_task("dataset", path=str(_write(tmp_path / "d.json", rows, "json")))
    assert task.split_sizes == {"train": 1, "validation": 1, "test": 2}
    rows[0]["split"] = "holdout"
    with pytest.raises(
        ConfigError, match="row 0 column 'split' must be one of train, validation, test.*got 'holdout'"
    ):
        make_task("dataset", path=str(_write(tmp_path / "e.json", rows, "json")))


# ---------------------------------------------------------------- math (math_verify)


@pytest.fixture(scope="module")
def math_task(tmp_path_factory):
    rows = [
        {"problem": "What is 1/2 as a decimal?", "solution": "0.5", "split": "test"},
        {"problem": "Solve x+1=3.", "solution": 2, "split": "test"},
        {"problem": "Simplify 2x+2.", "solution": "2(x+1)", "split": "train"},
    ]
    path = _write(tmp_path_factory.mktemp("math") / "m.jsonl", rows, "jsonl")
    return make_task("math", path=str(path), prompt_key="problem", answer_key="solution")


def test_math_verify_boxed(math_task):
    half, two = math_task.examples("test", 2, seed=0)
    if half.answer != "0.5":
        half, two = two, half
    assert half.target == "\\boxed{0.5}" and math_task.verify(half.target, half).correct
    # math_verify judges \frac{1}{2} equal to the gold 0.5 (checked against the installed version)
    r = math_task.verify("Half is $\\frac{1}{2}$, so \\boxed{\\frac{1}{2}}.", half)
    assert (r.correct, r.answer, r.reason) == (True, "\\frac{1}{2}", "correct")
    assert math_task.verify("\\boxed{1/2}", half).correct
    assert math_task.verify("\\boxed{0.25}", half).reason == "wrong answer '0.25' (expected 0.5)"
    assert math_task.verify("\\boxed{0.5} or \\boxed{0.25}", half).reason == "2 boxed answers"
    assert math_task.verify("\\boxed{0.5}\\boxed{0.5}", half).score == 0.0
    assert math_task.verify("The answer is 0.5", half).reason == "no \\boxed answer"
    assert math_task.verify("\\boxed{0.5", half).reason == "unclosed \\boxed{"
    assert math_task.verify("", half).reason == "empty completion"
    assert math_task.verify("x = \\boxed{2}", two).correct and two.answer == "2"
    train = math_task.examples("train", 1, seed=0)[0]
    assert math_task.verify("\\boxed{2x+2}", train).correct  # symbolic equality


def test_math_verify_outside_the_main_thread(math_task):
    half = next(ex for ex in math_task.examples("test", 2, seed=0) if ex.answer == "0.5")
    out = []
    t = threading.Thread(target=lambda: out.append(math_task.verify("\\boxed{\\frac{2}{4}}", half)))
    t.start()
    t.join()
    assert out[0].correct  # no "signal only works in main thread" error


def test_addition_mixed_lengths_spreads_the_digit_counts():
    plain = make_task("addition", digits=3).examples("train", 600, seed=0)
    mixed = make_task("addition", digits=3, mixed_lengths=True).examples("train", 600, seed=0)

    def share_short(exs):  # operands with fewer than 3 digits
        return sum(len(str(e.meta["a"])) < 3 for e in exs) / len(exs)

    assert share_short(plain) < 0.15
    assert 0.55 < share_short(mixed) < 0.78  # 2/3 expected
    assert all(e.answer == str(e.meta["a"] + e.meta["b"]) for e in mixed)
    with pytest.raises(ConfigError, match="data.mixed_lengths must be true or false"):
        make_task("addition", mixed_lengths="yes")


def test_a_data_file_without_a_data_task_says_which_task_reads_it():
    from advantage.resolve import resolve_config

    with pytest.raises(ConfigError) as e:
        resolve_config("sft", overrides={"data.path": "train.jsonl"})
    assert (
        "unknown option data.path for task 'addition'; set data.task=math or data.task=dataset to use"
        in str(e.value)
    )
