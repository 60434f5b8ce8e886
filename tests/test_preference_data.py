"""Preference data: pairwise and K-wise files (jsonl, json, parquet) and every loading error; the synthetic
task's determinism, disjoint splits, label-noise rate and hidden score; the task registry."""

from __future__ import annotations

import json

import pytest

from advantage.envs.text import PreferenceExample, hidden_score, load_preferences, make_preference_task
from advantage.envs.text.preference import PREFERENCE_TASKS, ranked_pairs
from advantage.errors import ConfigError

PAIRS = [
    {"prompt": "What is a database?", "chosen": "An organised collection of data.", "rejected": "Data."},
    {"prompt": "2+2=", "chosen": "4", "rejected": "5", "source": "math"},
]
RANKED = [{"prompt": "abc=", "responses": ["abc", "ab", "xyz"]}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_pairwise_and_kwise_rows_in_every_format(tmp_path, suffix):
    rows = PAIRS + RANKED
    path = tmp_path / f"prefs{suffix}"
    if suffix == ".jsonl":
        _jsonl(path, rows)
    elif suffix == ".json":
        path.write_text(json.dumps(rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        # parquet needs one schema: a pairwise and a K-wise file
        pq.write_table(pa.Table.from_pylist(PAIRS[:1]), path)
        out = load_preferences(path)
        assert out == [PreferenceExample(PAIRS[0]["prompt"], (PAIRS[0]["chosen"], PAIRS[0]["rejected"]))]
        path = tmp_path / "ranked.parquet"
        pq.write_table(pa.Table.from_pylist(RANKED), path)
        (ex,) = load_preferences(path)
        assert ex.responses == ("abc", "ab", "xyz")
        return
    out = load_preferences(path)
    assert [e.prompt for e in out] == ["What is a database?", "2+2=", "abc="]
    assert out[0].chosen == "An organised collection of data." and out[0].rejected == "Data."
    assert out[1].meta == {"source": "math"}
    assert out[2].responses == ("abc", "ab", "xyz") and out[2].pairs() == [(0, 1), (0, 2), (1, 2)]
    assert ranked_pairs(out) == [(0, 0, 1), (1, 0, 1), (2, 0, 1), (2, 0, 2), (2, 1, 2)]


def test_custom_column_names(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", [{"q": "hi", "good": "hello", "bad": "go away"}])
    (ex,) = load_preferences(path, prompt_key="q", chosen_key="good", rejected_key="bad")
    assert ex.responses == ("hello", "go away")


def test_loading_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_preferences(tmp_path / "missing.jsonl")
    (tmp_path / "p.csv").write_text("prompt,chosen,rejected\n")
    with pytest.raises(ConfigError, match=r"unsupported suffix '\.csv'; allowed: \.jsonl, \.json, \.parquet"):
        load_preferences(tmp_path / "p.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(PAIRS[0]) + "\n{not json\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: malformed JSON line"):
        load_preferences(bad)
    empty = _jsonl(tmp_path / "empty.jsonl", [])
    with pytest.raises(ConfigError, match="is empty"):
        load_preferences(empty)
    no_prompt = _jsonl(tmp_path / "np.jsonl", [{"question": "q", "chosen": "a", "rejected": "b"}])
    with pytest.raises(
        ConfigError, match=r"row 0 has no column 'prompt' \(columns present: question, chosen"
    ):
        load_preferences(no_prompt)
    no_rejected = _jsonl(tmp_path / "nr.jsonl", [PAIRS[0], {"prompt": "q", "chosen": "a"}])
    with pytest.raises(
        ConfigError, match=r"row 1 has no column 'rejected' \(columns present: prompt, chosen\)"
    ):
        load_preferences(no_rejected)
    neither = _jsonl(tmp_path / "ne.jsonl", [{"prompt": "q", "answer": "a"}])
    with pytest.raises(ConfigError, match="neither a 'responses' column nor 'chosen' and 'rejected'.*answer"):
        load_preferences(neither)
    one = _jsonl(tmp_path / "one.jsonl", [{"prompt": "q", "responses": ["a"]}])
    with pytest.raises(ConfigError, match="has 1 response.*at least 2"):
        load_preferences(one)
    not_list = _jsonl(tmp_path / "nl.jsonl", [{"prompt": "q", "responses": "ab"}])
    with pytest.raises(ConfigError, match="must be a list of strings"):
        load_preferences(not_list)
    same = _jsonl(tmp_path / "same.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "a"}])
    with pytest.raises(ConfigError, match="row 0: chosen and rejected are identical"):
        load_preferences(same)
    dup = _jsonl(tmp_path / "dup.jsonl", [{"prompt": "q", "responses": ["a", "b", "a"]}])
    with pytest.raises(ConfigError, match="responses 0 and 2 are identical"):
        load_preferences(dup)
    number = _jsonl(tmp_path / "num.jsonl", [{"prompt": "q", "chosen": 4, "rejected": "b"}])
    with pytest.raises(ConfigError, match="column 'chosen' must be a string"):
        load_preferences(number)


def test_dataset_task_splits_by_prompt_hash_or_split_column(tmp_path):
    rows = [{"prompt": f"p{i}", "chosen": "good", "rejected": "bad"} for i in range(400)]
    task = make_preference_task("dataset", path=str(_jsonl(tmp_path / "p.jsonl", rows)))
    sizes = task.split_sizes
    assert sum(sizes.values()) == 400 and sizes["train"] > 300 and sizes["test"] > 5
    tr = {e.prompt for e in task.examples("train", sizes["train"], 0)}
    te = {e.prompt for e in task.examples("test", sizes["test"], 0)}
    assert not tr & te
    assert task.examples("validation", 5, 1) == task.examples("validation", 5, 1)
    assert set(task.alphabet) >= set("p0123456789goodbad")
    with pytest.raises(ConfigError, match="has .* test examples, asked for n=1000"):
        task.examples("test", 1000, 0)
    tagged = [{**r, "split": "val" if i % 2 else "train"} for i, r in enumerate(rows[:10])]
    task = make_preference_task("dataset", path=str(_jsonl(tmp_path / "s.jsonl", tagged)))
    # no test rows: the validation rows stand in for them (as verl validates on its test files)
    assert task.split_sizes == {"train": 5, "validation": 5, "test": 5} and task.stand_ins == {
        "test": "validation"
    }


def test_registry_errors():
    assert set(PREFERENCE_TASKS) == {"synthetic", "dataset"}
    with pytest.raises(ConfigError, match="did you mean 'synthetic'"):
        make_preference_task("synthetc")
    with pytest.raises(ConfigError, match="unknown option data.kk .*did you mean data.k"):
        make_preference_task("synthetic", kk=3)
    with pytest.raises(ConfigError, match="data.path is required"):
        make_preference_task("dataset")
    with pytest.raises(ConfigError) as e:
        make_preference_task("synthetic", k=1, label_noise=0.7)
    assert "data.k must be an int in [2, 8]" in str(e.value)
    assert "data.label_noise must be a number in [0, 0.5)" in str(e.value)
    with pytest.raises(ConfigError, match="data.response_length=2 letters have only 3"):
        make_preference_task("synthetic", k=4, response_length=2)  # scores 0, 1/2 and 1
    assert len(make_preference_task("synthetic", k=7).examples("test", 20, 0)[0].responses) == 7
    with pytest.raises(ConfigError, match="data.prompt_length=8 must be less than data.letters=8"):
        make_preference_task("synthetic", prompt_length=8)


# ---- the synthetic task --------------------------------------------------------------------------


def test_hidden_score():
    assert hidden_score("abc=", "abca") == 1.0
    assert hidden_score("abc=", "axby") == 0.5
    assert hidden_score("abc=", "xyz") == 0.0
    assert hidden_score("abc=", "") == 0.0
    assert hidden_score("abc=", "=") == 0.0  # the separator is not a prompt letter


def test_synthetic_is_deterministic_with_disjoint_splits():
    task = make_preference_task("synthetic")
    a = task.examples("train", 300, seed=0)
    assert a == task.examples("train", 300, seed=0)
    assert a[:50] == task.examples("train", 50, seed=0)  # a prefix of a larger request
    assert a != task.examples("train", 300, seed=1)
    prompts = {s: {e.prompt for e in task.examples(s, 200, 0)} for s in ("train", "validation", "test")}
    assert all(len(p) == 200 for p in prompts.values())  # distinct prompts
    assert not prompts["train"] & prompts["validation"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["validation"] & prompts["test"]
    for e in a:
        assert set(e.prompt) <= set(task.alphabet) and e.prompt.endswith("=")
        assert all(set(r) <= set(task.letters) and 1 <= len(r) <= 6 for r in e.responses)
    assert task.special_tokens == ()


@pytest.mark.parametrize("k", [2, 4])
def test_synthetic_ranking_follows_the_hidden_score(k):
    task = make_preference_task("synthetic", k=k)
    for e in task.examples("validation", 200, 0):
        scores = [task.hidden_score(e.prompt, r) for r in e.responses]
        assert len(e.responses) == k == len(set(e.responses))
        assert list(e.meta["hidden_scores"]) == pytest.approx(scores)
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == k  # best first, no ties


def test_label_noise_flips_pairs_at_the_requested_rate():
    p, n = 0.2, 4000
    task = make_preference_task("synthetic", label_noise=p)
    flipped = [e.meta["hidden_scores"][0] < e.meta["hidden_scores"][1] for e in task.examples("train", n, 0)]
    rate = sum(flipped) / n
    assert abs(rate - p) < 4 * (p * (1 - p) / n) ** 0.5  # within 4 standard errors
    # K-wise: each adjacent pair swapped with probability p, in one pass from the top
    task4 = make_preference_task("synthetic", k=4, label_noise=p)
    best_moved = [
        e.meta["hidden_scores"][0] != max(e.meta["hidden_scores"]) for e in task4.examples("train", n, 0)
    ]
    assert abs(sum(best_moved) / n - p) < 4 * (p * (1 - p) / n) ** 0.5
    # noise changes labels, not prompts: the same prompts with and without noise
    clean = make_preference_task("synthetic").examples("train", 100, 0)
    noisy = task.examples("train", 100, 0)
    assert [(e.prompt, set(e.responses)) for e in clean] == [(e.prompt, set(e.responses)) for e in noisy]
