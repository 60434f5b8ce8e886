"""The math registries own their names: each function registered where it is defined, its metadata beside
it, the configs' choices derived from the registries, and the torch-free reading equal to the imported one."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import subprocess
import sys
import textwrap

import pytest

import advantage.math
from advantage.math.registry import FunctionRegistry, choices, described, static_specs


def registries() -> dict[str, FunctionRegistry]:
    """Every registry of the math layer, ``"module:VARIABLE"`` -> registry, found by importing each module."""
    out = {}
    for info in pkgutil.iter_modules(advantage.math.__path__):
        module = importlib.import_module(f"advantage.math.{info.name}")
        for var, value in vars(module).items():
            # made here (an imported registry has functions from another module)
            if isinstance(value, FunctionRegistry) and all(
                f.__module__ == module.__name__ for f in value.values()
            ):
                out[f"{info.name}:{var}"] = value
    return out


def test_the_walk_finds_the_registries():
    found = registries()
    assert {"advantages:GROUP_ADVANTAGES", "policy_losses:POLICY_LOSSES", "kl:KL_ESTIMATORS"} <= set(found)
    assert {"masked:LOSS_AGGREGATIONS", "preference:DPO_LOSSES", "value_losses:VALUE_LOSSES"} <= set(found)


@pytest.mark.parametrize("target", sorted(registries()))
def test_reading_the_source_gives_the_imported_registry(target):
    """Names (in order), summaries, hyperparameters and metadata: the torch-free reading the configs use
    equals what the decorators registered."""
    live = registries()[target]
    assert len(live) >= 2
    assert static_specs(target) == live.specs()
    assert list(static_specs(target)) == list(live)
    for name, spec in live.specs().items():
        assert spec.summary, f"{target} {name}: no summary"
        assert live[name].__name__.removeprefix(live.prefix) == name


def _config_classes():
    from advantage.registry import all_algorithms

    for algo in all_algorithms().values():
        stack = [("", algo.config)]
        while stack:
            prefix, cls = stack.pop()
            for f in dataclasses.fields(cls):
                if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None):
                    stack.append((f"{prefix}{f.name}.", f.type))
                    continue
                default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
                if dataclasses.is_dataclass(default):
                    stack.append((f"{prefix}{f.name}.", type(default)))
                elif f.metadata.get("choices"):
                    yield algo.name, f"{prefix}{f.name}", tuple(f.metadata["choices"])


# An option whose values share names with a registry but picks something else.
NOT_FROM_A_REGISTRY = {
    ("dqn", "algorithm.loss"): "DQN's TD loss in its fused gradient step (huber or mse on TD errors)",
}


def test_every_option_naming_registry_entries_offers_exactly_a_registry_selection():
    """An option that offers any registered name offers the registry's names, all or those with one
    metadata value (``loss: clipped=True``), in registration order: no list of names typed again."""
    specs = {t: static_specs(t) for t in registries()}
    selections = {}
    for target, entries in specs.items():
        selections[choices(target)] = target
        for spec in entries.values():
            for key, value in spec.meta.items():
                if key != "summary":
                    selections.setdefault(choices(target, **{key: value}), target)
    seen = 0
    for algo, key, offered in _config_classes():
        named = [t for t, entries in specs.items() if set(offered) & set(entries)]
        if not named or (algo, key) in NOT_FROM_A_REGISTRY:
            continue
        seen += 1
        assert offered in selections, f"{algo} {key} offers {offered}, not a selection of {named}"
    assert seen >= 8  # grpo advantage/loss/loss_agg/kl, ppo value_loss, reinforce, dpo, ppo_rlhf, ...


def test_an_unknown_name_and_a_second_registration_are_refused():
    reg: FunctionRegistry = FunctionRegistry("thing", prefix="t_")

    @reg.register(flag=True)
    def t_one(x, scale: float = 2.0):
        """One thing."""
        return x * scale

    assert list(reg) == ["one"] and reg["one"](3) == 6
    assert reg.spec("one").params == ("scale",) and reg.spec("one").summary == "One thing"
    with pytest.raises(KeyError, match="unknown thing 'two'; allowed: one"):
        reg["two"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(t_one)


def test_described_lists_the_selection_with_summaries():
    text = described("policy_losses:POLICY_LOSSES", "policy loss", clipped=True)
    assert text.startswith("policy loss: ") and "ppo_clip (" in text and "gspo (" in text
    assert "pg" not in text.split(":", 1)[1].replace("ppo", "")


def test_the_configs_read_the_registries_without_torch():
    code = textwrap.dedent(
        """
        import sys
        import advantage.configs
        from advantage.registry import all_algorithms
        all_algorithms()
        from advantage.math.registry import static_specs
        static_specs("advantages:GROUP_ADVANTAGES")
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("advantage.math.")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['advantage.math.registry']", out
