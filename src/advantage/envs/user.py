"""A user's own environment, named in a config or passed as an object.

``env.id`` takes, besides an id in Gymnasium's registry:

* ``my_package:MyEnv-v0`` — Gymnasium's own form: the module is imported (its import registers the id,
  as ``gymnasium.make`` does it), then the id is looked up;
* ``my_package.module:MyEnvClass`` — a ``gymnasium.Env`` subclass, or a function (any callable) that
  returns an env, named by module and attribute path.

From Python (:func:`advantage.train`, :func:`advantage.resume`, :class:`advantage.Run`), ``env=`` also takes
the class or the zero-argument callable itself (:func:`env_id_for`): one that a new process can import
again is recorded by its ``module:name``; anything else (a lambda, a function defined in another
function or in ``__main__``) is registered for this process only, and ``resume`` / ``eval`` in a new process
need the same ``env=`` again.

Trust: importing a module runs its code, exactly as ``gymnasium.make("module:Id")`` does. A config file
that names a module is as trusted as a Python script (docs/reliability.md). Names that are not dotted
Python identifiers are refused before anything is imported; after the import, an object that is not an
env class or a callable is refused.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from advantage.errors import EnvError

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_LOCAL = "advantage-local"  # namespace of envs registered from objects a new process cannot import
_USER = "advantage-user"  # namespace of the classes and factories named module:name


def is_user_id(env_id: str) -> bool:
    """Whether ``env_id`` names a module (``module:...``)."""
    return ":" in env_id


def internal_id(env_id: str) -> str:
    """The registry id a class or factory named ``module:name`` is registered under (``gymnasium.make``
    reads a colon as "import this module", so the id itself cannot hold one)."""
    return f"{_USER}/{env_id.replace(':', '.')}"


def resolve(env_id: str) -> str:
    """The id in Gymnasium's registry that ``env_id`` stands for: itself, or for ``module:name`` the
    registered id after importing ``module`` (a class or factory ``name`` is registered under
    :func:`internal_id`). Raises :class:`EnvError` with one line."""
    if not is_user_id(env_id):
        return env_id
    if internal_id(env_id) in gym.registry:  # registered earlier in this process
        return internal_id(env_id)
    module_name, _, attr = env_id.partition(":")
    if not _DOTTED.fullmatch(module_name) or not attr:
        raise EnvError(
            f"env.id {env_id!r}: {module_name!r} is not a module name (dotted Python identifiers, "
            "e.g. my_package.envs:MyEnv-v0 or my_package.envs:MyEnvClass)"
        )
    module = _import(env_id, module_name)
    if attr in gym.registry:
        return attr  # gymnasium's "module:Id" form: the import registered the id
    if not _DOTTED.fullmatch(attr):
        raise EnvError(
            f"env.id {env_id!r}: importing {module_name!r} registered no environment {attr!r}, and it is not "
            "an attribute name"
        )
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            registered = sorted(
                i for i, s in gym.registry.items() if str(s.entry_point).startswith(module_name)
            )
            hint = f" (ids it registered: {', '.join(registered[:5])})" if registered else ""
            raise EnvError(f"env.id {env_id!r}: module {module_name!r} has no attribute {attr!r}{hint}")
        obj = getattr(obj, part)
    register_object(env_id, obj)
    return internal_id(env_id)


def _import(env_id: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        where = "" if e.name == module_name else f" (it imports {e.name!r}, which is missing)"
        raise EnvError(
            f"env.id {env_id!r}: no module named {module_name!r}{where}; is its package installed, or its "
            "folder on PYTHONPATH?"
        ) from None
    except Exception as e:
        raise EnvError(
            f"env.id {env_id!r}: importing {module_name!r} failed: {type(e).__name__}: {e}"
        ) from None


def register_object(env_id: str, obj: Any) -> None:
    """Register ``obj`` (an env class or a callable returning an env) for ``env_id`` (a ``module:name``
    under :func:`internal_id`)."""
    if isinstance(obj, type):
        if not issubclass(obj, gym.Env):
            raise EnvError(
                f"env.id {env_id!r}: {obj.__qualname__} is a class but not a gymnasium.Env subclass"
            )
        entry: Callable[..., Any] = _checked_factory(env_id, obj)
    elif callable(obj):
        entry = _checked_factory(env_id, obj)
    else:
        raise EnvError(
            f"env.id {env_id!r}: a {type(obj).__name__}, not a gymnasium.Env subclass or a function that "
            "returns an env"
        )
    key = internal_id(env_id) if is_user_id(env_id) else env_id
    if key in gym.registry:
        del gym.registry[key]
    gym.register(id=key, entry_point=entry, disable_env_checker=False)


def _checked_factory(env_id: str, factory: Callable[..., Any]) -> Callable[..., gym.Env]:
    """The factory (or class), called with Gymnasium's keyword arguments only when there are any (a
    zero-argument function is the common case; ``render_mode=None`` is left out, so a class that takes no
    ``render_mode`` builds too), and its result checked to be an env. ``__wrapped__`` lets the env
    section's keys be checked against the factory's own signature."""

    def make(**kwargs: Any) -> gym.Env:
        kwargs = {k: v for k, v in kwargs.items() if not (k == "render_mode" and v is None)}
        env = factory(**kwargs) if kwargs else factory()
        if not isinstance(env, gym.Env):
            raise EnvError(
                f"env.id {env_id!r}: the factory returned a {type(env).__name__}, not a gymnasium.Env"
            )
        return env

    make.__wrapped__ = factory  # type: ignore[attr-defined]
    return make


def env_id_for(env: Any) -> str:
    """The ``env.id`` for ``env=`` of the Python API: a string as it is; a class or callable by its
    ``module:qualname`` when a new process can import it again, otherwise registered for this process
    under ``advantage-local/<name>`` (a note says that resume and eval then need the same ``env=``)."""
    if isinstance(env, str):
        return env
    if isinstance(env, gym.Env):
        raise EnvError(
            "env=: pass the env's class or a function that builds it (env=MyEnv or env=lambda: MyEnv(...)), "
            "not an instance: the run builds a copy per vector slot and for evaluation"
        )
    if not callable(env):
        raise EnvError(
            f"env=: a {type(env).__name__}; pass a registered id, a gymnasium.Env subclass or a function "
            "returning an env"
        )
    module, qualname = getattr(env, "__module__", None), getattr(env, "__qualname__", None)
    if (
        isinstance(module, str)
        and isinstance(qualname, str)
        and module != "__main__"
        and "<" not in qualname
        and _importable(module, qualname, env)
    ):
        env_id = f"{module}:{qualname}"
        register_object(env_id, env)
        return env_id
    name = re.sub(r"[^\w.-]", "_", str(qualname or type(env).__name__))
    env_id = f"{_LOCAL}/{name}"
    register_object(env_id, env)
    print(
        f"note: env {qualname or env!r} is not importable by name (defined in __main__ or in a function); "
        f"the run records env.id={env_id}, and resume or eval in a new process need the same env= again",
        file=sys.stderr,
    )
    return env_id


def _importable(module: str, qualname: str, obj: Any) -> bool:
    mod = sys.modules.get(module)
    target: Any = mod
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target is obj


def needs_env_object(env_id: str) -> str | None:
    """For an id registered from an object in another process (``advantage-local/...``) that this process
    has not registered: the one-line error that says to pass ``env=``; else None."""
    if env_id.startswith(f"{_LOCAL}/") and env_id not in gym.registry:
        return (
            f"env.id {env_id!r} was registered from a Python object in the process that trained it (a "
            "lambda, or a function defined in __main__ or inside a function); pass the same object again: "
            "advantage.resume(run_dir, env=...) or advantage.Run(run_dir, env=...)"
        )
    return None
