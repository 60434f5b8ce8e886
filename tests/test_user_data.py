"""A user's own data and model: dataset layouts detected from the columns (plain, verl parquet, GSM8K,
MATH, TRL prompt-completion and preference, conversational or not), nested keys, defaults measured from
the data, data problems reported before the run folder exists, the task options in ``advantage list``,
and a local Hugging Face folder (BPE tokenizer with a chat template, generation_config.json, no pad token)
through SFT → GRPO → eval, DPO and the reward model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import advantage
from advantage.cli import main
from advantage.envs.text.core import ChatPrompt
from advantage.envs.text.datasets import read_dataset
from advantage.envs.text.preference import load_preferences
from advantage.envs.text.samples import FILES, word_problems, write_examples, write_rows
from advantage.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"trainer.tensorboard": False, "trainer.eval_every": 0}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The example files, 40 problems in every layout (every tenth row validation, the next test)."""
    return write_examples(tmp_path_factory.mktemp("data"), n=40)


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    """A user's own model folder: tiny Qwen2, BPE tokenizer trained here, ChatML template, no pad token."""
    from advantage.lm.tiny_folder import save_tiny_folder

    texts = [f"{p['question']} {p['reasoning']} \\boxed{{{p['answer']}}}" for p in word_problems(300, seed=1)]
    return save_tiny_folder(tmp_path_factory.mktemp("model") / "qwen2-tiny", texts)


# ---- formats ----------------------------------------------------------------------------------------


def test_each_format_is_detected_from_the_columns(data):
    gold = word_problems(40)[0]
    expect = {"plain": "plain", "gsm8k": "gsm8k", "math": "math", "verl": "verl"}
    expect["prompt_completion"] = "prompt_completion"
    for name, fmt_name in expect.items():
        fmt, rows = read_dataset(data[name])
        assert fmt.name == fmt_name
        assert rows[0].answer == gold["answer"], name
        assert rows[0].origin == f"{data[name]} row 0"
    # GSM8K: '#### N' is the gold, the reasoning with \boxed{N} the worked solution
    ex = read_dataset(data["gsm8k"])[1][0]
    assert ex.target == f"{gold['reasoning']}\n\\boxed{{{gold['answer']}}}"
    # MATH: the solution is the target, its \boxed content the gold
    ex = read_dataset(data["math"])[1][0]
    assert ex.target.endswith(f"$\\boxed{{{gold['answer']}}}$.") and ex.answer == gold["answer"]
    # verl: chat-message prompt, gold in reward_model.ground_truth, the other columns kept as meta
    ex = read_dataset(data["verl"])[1][0]
    assert isinstance(ex.prompt, ChatPrompt) and ex.prompt.messages[0]["role"] == "user"
    assert ex.prompt.messages[0]["content"].startswith(gold["question"])
    assert ex.meta["data_source"] == "word_problems" and ex.meta["extra_info"]["index"] == 0
    assert "reward_model" not in ex.meta and "prompt" not in ex.meta
    # a chat prompt keeps its messages through pickling (Ray workers) and copies
    import copy
    import pickle

    for again in (pickle.loads(pickle.dumps(ex.prompt)), copy.deepcopy(ex.prompt)):
        assert isinstance(again, ChatPrompt) and again.messages == ex.prompt.messages and again == ex.prompt


def test_gold_answers_of_gsm8k_and_math(tmp_path):
    rows = [
        {"question": "q1", "answer": "So 1000 + 234 = 1234.\n#### 1,234"},
        {"question": "q2", "answer": "no final answer"},
    ]
    p = write_rows(tmp_path / "gsm.jsonl", rows)
    with pytest.raises(ConfigError, match=r"gsm.jsonl: row 1 column 'answer' has no '#### N' final answer"):
        read_dataset(p)
    assert read_dataset(write_rows(tmp_path / "g1.jsonl", rows[:1]))[1][0].answer == "1234"
    math = [{"problem": "p", "solution": r"First \boxed{2}, then $\boxed{\frac{1}{2}}$."}]
    assert read_dataset(write_rows(tmp_path / "m.jsonl", math))[1][0].answer == r"\frac{1}{2}"


def test_nested_keys_by_dotted_names(tmp_path):
    rows = [{"q": "1+1=", "gold": {"value": 2, "note": "x"}}, {"q": "2+2=", "gold": {"note": "y"}}]
    p = write_rows(tmp_path / "nested.jsonl", rows)
    with pytest.raises(ConfigError, match=r"row 1 has no key 'gold.value' \(column 'gold' has keys: note\)"):
        read_dataset(p, prompt_key="q", answer_key="gold.value")
    ex = read_dataset(write_rows(tmp_path / "ok.jsonl", rows[:1]), prompt_key="q", answer_key="gold.value")[1]
    assert ex[0].answer == "2" and ex[0].meta == {}


def test_trl_preference_formats(tmp_path, data):
    plain, chat = load_preferences(data["preference"]), load_preferences(data["preference_chat"])
    assert [(e.prompt, e.responses) for e in plain] == [(e.prompt, e.responses) for e in chat]
    assert isinstance(chat[0].prompt, ChatPrompt) and not isinstance(plain[0].prompt, ChatPrompt)
    # implicit prompt: whole conversations that share everything but the last message
    user = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]
    row = {"chosen": [*user, {"role": "assistant", "content": "4"}]}
    row["rejected"] = [*user, {"role": "assistant", "content": "5"}]
    (ex,) = load_preferences(write_rows(tmp_path / "implicit.jsonl", [row]))
    assert ex.prompt.messages == tuple(user) and ex.responses == ("4", "5")
    row["rejected"] = [{"role": "user", "content": "3+3?"}, {"role": "assistant", "content": "5"}]
    with pytest.raises(ConfigError, match="implicit.jsonl: row 0 has no column 'prompt'.*share"):
        load_preferences(write_rows(tmp_path / "implicit.jsonl", [row]))


def test_the_documented_example_files_load(tmp_path):
    folder = ROOT / "examples" / "data"
    for name, path in write_examples(tmp_path, n=40, seed=0).items():  # what make_examples.py writes
        if path.suffix == ".jsonl":
            assert path.read_bytes() == (folder / FILES[name]).read_bytes(), name
    for name, file in FILES.items():
        if name.startswith("preference"):
            assert len(load_preferences(folder / file)) == 40
        else:
            fmt, rows = read_dataset(folder / file)
            assert fmt.name == name and len(rows) == 40
    from advantage.envs.text.samples import VERL_FILES, write_verl_files

    written = write_verl_files(tmp_path, n=40, seed=0)  # verl's own pair, split in extra_info only
    for split, file in VERL_FILES.items():
        fmt, rows = read_dataset(folder / file)
        assert fmt.name == "verl" and len(rows) == (32 if split == "train" else 8)
        assert {r.meta["extra_info"]["split"] for r in rows} == {split} and "split" not in rows[0].meta
        assert [r.prompt for r in rows] == [r.prompt for r in read_dataset(written[split])[1]]


# ---- data problems, before the run folder exists ------------------------------------------------------


def _bad(tmp_path, rows, match, algo="grpo", **over):
    path = write_rows(tmp_path / "data.jsonl", rows)
    run_dir = tmp_path / "run"
    cfg = {**QUIET, "data.task": "math", "data.path": str(path), "trainer.run_dir": str(run_dir), **over}
    with pytest.raises(ConfigError, match=match) as e:
        advantage.train(algo, quiet=True, **cfg)
    assert str(path) in str(e.value)  # the file is named
    assert not run_dir.exists()  # nothing created
    return str(e.value)


def _rows(n=20):
    return [{"prompt": p["question"], "answer": p["answer"], "split": p["split"]} for p in word_problems(n)]


def test_missing_column(tmp_path):
    _bad(
        tmp_path,
        _rows(),
        r"row 0 has no column 'question' \(columns present: prompt, answer, split\)",
        **{"data.prompt_key": "question"},
    )


def test_nested_key_absent(tmp_path):
    rows = [
        {"prompt": r["prompt"], "reward_model": {"ground_truth": r["answer"]}, "split": r["split"]}
        for r in _rows()
    ]
    del rows[3]["reward_model"]["ground_truth"]
    _bad(
        tmp_path,
        rows,
        r"row 3 has no key 'reward_model.ground_truth' \(column 'reward_model' has keys: none\)",
    )


def test_prompt_too_long(tmp_path):
    rows = _rows()
    rows[5]["prompt"] += " And then some more words."
    given = {
        "data.max_prompt_length": 20,
        "data.train_size": 16,
        "data.validation_size": 2,
        "data.test_size": 2,
        "trainer.eval_episodes": 2,  # everything set: only the prompt's length is wrong
    }
    text = _bad(tmp_path, rows, r"data.jsonl row 5: the prompt has \d+ tokens", **given)
    n = len(rows[5]["prompt"])  # the scratch model's tokenizer has one token per character
    assert f"has {n} tokens" in text and "raise data.max_prompt_length" in text


def test_empty_split(tmp_path):
    rows = [{**r, "split": "test" if r["split"] == "train" else r["split"]} for r in _rows()]
    _bad(tmp_path, rows, "the train split is empty")


# ---- verl's files: a split in extra_info, separate train and validation files, lists --------------------

# A GRPO run on a data file with the scratch model, one step: what "trains" means below.
_ONE_STEP = {
    "data.task": "math",
    "data.rollout_batch_size": 2,
    "data.max_response_length": 8,
    "worker.rollout.n": 2,
    "worker.actor.mini_batch_size": 2,
    "worker.actor.model.hidden_size": 32,
    "worker.actor.model.layers": 1,
    "worker.actor.model.heads": 2,
    "trainer.total_steps": 1,
    "trainer.eval_episodes": 4,
}


def _train_and_eval(tmp_path, capsys, name, **data):
    run = advantage.train(
        "grpo", progress=False, **QUIET, **_ONE_STEP, **data, **{"trainer.run_dir": str(tmp_path / name)}
    )
    out = capsys.readouterr().out
    assert main(["eval", str(run.dir), "--json"]) == 0
    return run, out, json.loads(capsys.readouterr().out)


def test_verls_own_files_train_and_evaluate_as_they_are(tmp_path, capsys):
    """verl's layout (no split column; extra_info.split) as its preprocessing writes it: the pair of files
    (data.path and data.validation_path, verl's train_files and val_files), one file holding both splits
    in extra_info.split, and a list of files, each trains and evaluates with nothing edited; the train file
    alone trains with one warning line and `advantage eval` says in one line there is no test split."""
    from advantage.envs.text.samples import write_verl_files

    files = write_verl_files(tmp_path, n=60)
    train, test = str(files["train"]), str(files["test"])
    run, out, res = _train_and_eval(
        tmp_path, capsys, "pair", **{"data.path": train, "data.validation_path": test}
    )
    assert run.step == 1 and res["split"] == "test" and res["n"] == 12
    assert run.config.data.train_size == 48 and run.config.data.validation_size == 12
    assert "no test rows: the validation rows stand in (as verl validates on its test files)" in out
    # one file whose rows name their split in extra_info.split (train and test)
    both = write_rows(tmp_path / "both.parquet", read_rows(files["train"]) + read_rows(files["test"]))
    run, out, res = _train_and_eval(tmp_path, capsys, "one", **{"data.path": str(both)})
    assert run.config.data.train_size == 48 and res["n"] == 12
    # verl's list of files
    run, _, res = _train_and_eval(tmp_path, capsys, "list", **{"data.path": [train, test]})
    assert run.config.data.train_size == 48 and res["n"] == 12
    # the train file alone: every row says train; training warns in one line and runs without evaluation
    run = advantage.train(
        "grpo",
        progress=False,
        **QUIET,
        **_ONE_STEP,
        **{"data.path": train, "trainer.run_dir": str(tmp_path / "alone")},
    )
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning:")]
    assert (
        "no validation rows: no evaluation during training; no test rows: advantage eval has no test" in line
    )
    assert run.step == 1 and not any("eval/accuracy" in r for r in run.metrics)
    assert main(["eval", str(run.dir)]) == 2
    assert "the test split is empty, nothing to evaluate; give data.test_path=FILE" in capsys.readouterr().err


def read_rows(path):
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_a_small_evaluation_split_says_so(tmp_path):
    """A GSM8K file without a split column: 40 rows hashed 90/5/5 give 2 test prompts; the run says so."""
    from advantage.resolve import resolve_config

    rows = [
        {"question": p["question"], "answer": f"{p['reasoning']}\n#### {p['answer']}"}
        for p in word_problems(40)
    ]
    path = write_rows(tmp_path / "gsm8k.jsonl", rows)
    _, cfg = resolve_config("grpo", overrides={**_ONE_STEP, "data.path": str(path)})
    (line,) = cfg.__dict__["_warnings"]
    n = cfg.data.test_size
    assert n < 20 and f"test has {n} rows, so its accuracy moves in steps of {100 / n:.3g} %" in line, line
    assert line.startswith(f"warning: data.path {str(path)!r}: ")


def test_extra_info_split_and_bad_file_lists(tmp_path):
    from advantage.envs.text.file_tasks import MathTask

    rows = [
        {"prompt": f"{i}+1=", "answer": str(i + 1), "extra_info": {"split": s, "index": i}}
        for i, s in enumerate(["train", "train", "test", "val"])
    ]
    task = MathTask(path=str(write_rows(tmp_path / "x.jsonl", rows)))
    assert task.split_sizes == {"train": 2, "validation": 1, "test": 1} and task.stand_ins == {}
    rows[1]["extra_info"]["split"] = "holdout"
    with pytest.raises(ConfigError, match=r"x.jsonl row 1 column 'extra_info.split' must be one of"):
        MathTask(path=str(write_rows(tmp_path / "x.jsonl", rows)))
    with pytest.raises(
        ConfigError, match=r"data.validation_path must be a file or a non-empty list of files"
    ):
        MathTask(path=str(tmp_path / "x.jsonl"), validation_path=[])


def test_wrong_type(tmp_path):
    rows = _rows()
    rows[2]["answer"] = [1, 2]
    _bad(tmp_path, rows, r"row 2 column 'answer' must be a string or a number, got \[1, 2\]")


def test_sft_target_too_long(tmp_path):
    _bad(
        tmp_path,
        _rows(),
        r"row \d+: a response has \d+ tokens with its EOS, longer than "
        r"data.max_response_length=4",
        algo="sft",
        **{"data.max_response_length": 4},
    )


# ---- options a user can find ----------------------------------------------------------------------------


def test_list_shows_the_task_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps table cells to the terminal's width
    assert main(["list", "grpo", "data.task=math"]) == 0
    out = capsys.readouterr().out
    for key in (
        "data.path",
        "data.format",
        "data.prompt_key",
        "data.answer_key",
        "data.target_key",
        "data.max_prompt_length",
        "data.max_response_length",
        "data.timeout_seconds",
    ):
        assert key in out, key
    assert main(["list", "dpo", "data.task=dataset"]) == 0
    assert "data.chosen_key" in capsys.readouterr().out
    assert main(["list", "grpo", "data.task=nope"]) == 2


def test_every_task_option_has_a_meaning():
    from advantage.envs.text.preference import PREFERENCE_TASKS
    from advantage.envs.text.registry import TASKS
    from advantage.registry import all_algorithms

    for algo in all_algorithms().values():
        if algo.task_options is None:
            continue
        for task in sorted({*TASKS, *PREFERENCE_TASKS}):
            try:
                rows = algo.task_options(task)
            except ConfigError:
                continue
            assert all(help_ for _, _, help_ in rows), (algo.name, task, rows)


# ---- a user's own model folder, end to end ------------------------------------------------------------


def test_user_model_folder_is_what_users_have(user_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(user_model)
    assert tok.pad_token is None and tok.chat_template
    assert json.loads((user_model / "generation_config.json").read_text())["do_sample"] is True


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, data, user_model):
    """SFT of the user's model on the GSM8K-format file (math task: targets end in \\boxed{N})."""
    run_dir = tmp_path_factory.mktemp("sft") / "run"
    return advantage.train(
        "sft",
        quiet=True,
        **QUIET,
        **{
            "data.task": "math",
            "data.path": str(data["gsm8k"]),
            "data.max_response_length": 40,
            "model.path": str(user_model),
            "algorithm.batch_size": 8,
            "algorithm.warmup_steps": 1,
            "trainer.total_steps": 3,
            "trainer.eval_episodes": 2,
            "trainer.run_dir": str(run_dir),
        },
    )


@pytest.mark.slow
def test_sft_on_gsm8k_file_with_user_model(sft_run, data, user_model):
    from transformers import AutoTokenizer

    d = sft_run.config.data
    assert sft_run.step == 3
    assert (d.train_size, d.validation_size, d.test_size) == (32, 4, 4)  # every row of each split
    tok = AutoTokenizer.from_pretrained(user_model)
    longest = max(len(tok(r.prompt)["input_ids"]) for r in read_dataset(data["gsm8k"])[1])
    assert d.max_prompt_length == longest  # measured with the policy's tokenizer


def _grpo(tmp_path, sft_run, path, **over):
    return advantage.train(
        "grpo",
        quiet=True,
        **QUIET,
        **{
            "data.task": "math",
            "data.path": str(path),
            "data.rollout_batch_size": 2,
            "data.max_response_length": 16,
            "worker.rollout.n": 4,
            "worker.actor.mini_batch_size": 2,
            "worker.actor.model.path": str(sft_run.dir),
            "trainer.total_steps": 2,
            "trainer.eval_episodes": 2,
            "trainer.run_dir": str(tmp_path / "grpo"),
            **over,
        },
    )


@pytest.mark.slow
def test_grpo_on_gsm8k_file_from_the_sft_run(tmp_path, sft_run, data):
    run = _grpo(tmp_path, sft_run, data["gsm8k"])
    assert run.step == 2 and run.config.data.max_prompt_length == sft_run.config.data.max_prompt_length


@pytest.mark.slow
def test_grpo_on_verl_parquet_then_eval_with_samples(tmp_path, sft_run, data, capsys):
    from transformers import AutoTokenizer

    from advantage.algos.llm.models import model_folder

    run = _grpo(tmp_path, sft_run, data["verl"])
    tok = AutoTokenizer.from_pretrained(model_folder(str(sft_run.dir)))
    chats = [list(r.prompt.messages) for r in read_dataset(data["verl"])[1]]  # rendered with the template
    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in chats]
    longest = max(len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"])
    assert run.config.data.max_prompt_length == longest
    capsys.readouterr()
    assert main(["eval", str(run.dir), "--samples", "8", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["split"] == "test" and res["n"] == 4 and res["samples"] == 8
    assert 0 <= res["pass@8"] <= 1 and "maj@8" in res


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dpo", "reward_model"])
def test_dpo_and_reward_model_on_trl_preference_files(tmp_path, data, user_model, algo):
    for name in ("preference", "preference_chat"):
        run = advantage.train(
            algo,
            quiet=True,
            **QUIET,
            **{
                "data.task": "dataset",
                "data.path": str(data[name]),
                "model.path": str(user_model),
                "algorithm.batch_size": 8,
                "trainer.total_steps": 2,
                "trainer.eval_episodes": 2,
                "trainer.run_dir": str(tmp_path / name),
            },
        )
        assert run.step == 2 and run.config.data.train_size == 32


@pytest.mark.slow
def test_sft_on_trl_prompt_completion_file(tmp_path, data, user_model):
    run = advantage.train(
        "sft",
        quiet=True,
        **QUIET,
        **{
            "data.task": "dataset",
            "data.path": str(data["prompt_completion"]),
            "model.path": str(user_model),
            "algorithm.batch_size": 8,
            "trainer.total_steps": 2,
            "trainer.run_dir": str(tmp_path / "run"),
        },
    )
    assert run.step == 2 and run.config.data.kwargs["path"] == str(data["prompt_completion"])
    assert run.config.trainer.eval_episodes == 4  # lowered to the file's validation rows


def test_without_a_model_folder_the_docs_say_what_model_path_to_pass(tmp_path):
    """docs/algorithms/datasets.md: no model folder → leave model.path out; a scratch model with a tokenizer
    of the data's characters is built, and the file trains (one step here)."""
    doc = (ROOT / "docs" / "algorithms" / "datasets.md").read_text()
    assert "Without a model folder, leave `model.path` out" in doc
    run = advantage.train(
        "sft",
        quiet=True,
        **QUIET,
        **{
            "data.task": "math",
            "data.path": str(ROOT / "examples" / "data" / "gsm8k.jsonl"),
            "data.max_response_length": 256,
            "model.hidden_size": 32,
            "model.layers": 1,
            "model.heads": 2,
            "model.max_position_embeddings": 512,
            "trainer.total_steps": 1,
            "trainer.eval_episodes": 1,
            "trainer.run_dir": str(tmp_path / "sft"),
        },
    )
    assert run.step == 1 and run.config.model.path is None
