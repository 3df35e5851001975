"""docs/user/errors.md lists every error code and name that hoarddb.errors defines."""

from pathlib import Path

from hoarddb.errors import ERRORS

DOC = (Path(__file__).parent.parent / "docs" / "user" / "errors.md").read_text()


def test_every_error_is_documented():
    for code, cls in ERRORS.items():
        assert f"| {cls.codeName} | `{cls.__name__}` |" in DOC, cls
        assert f"\n| {code} " in DOC or f"\n| {code} (" in DOC, code


def test_duplicate_key_is_0x0f():
    assert ERRORS[0x0F].codeName == "DUPLICATE_KEY"
