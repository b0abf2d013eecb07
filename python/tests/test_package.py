"""The package as an IDE and a reader see it: py.typed, stubs that match the
compiled module, and public namespaces without stray helper modules."""
import ast
import importlib
import pathlib
import types

import qkv
import qkv._core

PACKAGE = pathlib.Path(qkv.__file__).resolve().parent

# Modules whose public names are checked for leaked helper modules
# (qkv.sentence_encoder belongs to another branch's work, issue 22 names the two below).
PUBLIC_MODULES = ["qkv", "qkv.bert", "qkv.masks", "qkv.models", "qkv.optim", "qkv.runtime",
                  "qkv.text", "qkv.nn", "qkv.nn.functional", "qkv.nn.layers",
                  "qkv.nn.multihead_attention", "qkv.nn.positional", "qkv.nn.transformer"]


def public(names):
    return {n for n in names if not n.startswith("_")}


def test_the_package_says_it_is_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert (PACKAGE / "_core.pyi").is_file()


def stub_tree():
    return ast.parse((PACKAGE / "_core.pyi").read_text(encoding="utf-8"))


def test_core_stub_names_are_the_compiled_modules_names():
    tree = stub_tree()
    stubbed = public(node.name for node in tree.body
                     if isinstance(node, (ast.FunctionDef, ast.ClassDef)))
    assert stubbed == public(dir(qkv._core)), (
        "python/qkv/_core.pyi is out of date (regenerate it, see its header): "
        f"only in the stub {sorted(stubbed - public(dir(qkv._core)))}, "
        f"only in the module {sorted(public(dir(qkv._core)) - stubbed)}")


def test_core_stub_classes_have_the_compiled_members():
    for node in stub_tree().body:
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(qkv._core, node.name)
        stubbed = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
        stubbed |= {target.id for item in node.body if isinstance(item, ast.AnnAssign)
                    for target in [item.target] if isinstance(target, ast.Name)}
        # Members the class defines itself (inherited ones are stubbed on the base).
        own = public(vars(cls)) - {"__init__"}
        assert own <= stubbed | {"__init__"}, f"{node.name}: {sorted(own - stubbed)} not stubbed"
        for name in public(stubbed):
            assert hasattr(cls, name), f"_core.pyi: {node.name}.{name} is not in the module"


def test_no_helper_modules_leak_into_public_namespaces():
    leaks = []
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in public(dir(module)):
            value = getattr(module, attr)
            if isinstance(value, types.ModuleType) and not value.__name__.startswith("qkv."):
                leaks.append(f"{name}.{attr} ({value.__name__})")
    assert not leaks, "helper modules visible as public names: " + ", ".join(leaks)
    assert not hasattr(qkv.nn.functional, "collections")
    assert not hasattr(qkv.optim, "np")


def test_all_lists_only_existing_names():
    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            assert hasattr(module, attr), f"{name}.__all__ names {attr}, which is missing"
