"""The argparse pieces every `interlock` verb shares: a help formatter that shows each option's
default, a parser whose errors are one line (exit status 2), and argparse types made from
validate.py's checks. A module of its own so that cli/ and the verbs with parsers of their
own (cli/approve.py) import it without importing each other."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from .errors import InvalidInput

__all__ = ["HelpFormatter", "Parser", "checked"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every option's help shows its default: argparse's value, unless the help text already
    says what the default is in words (e.g. "default: ILR_DSN or the local cluster")."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text or not action.option_strings or action.required
                or action.default in (None, False, argparse.SUPPRESS)):  # fmt: skip
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `interlock VERB: error: ...`, exit status 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # argparse declares NoReturn
        print(f"{self.prog}: error: {' '.join(message.split())} (see `{self.prog} --help`)",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(2)


def checked(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a validate.py check: its InvalidInput message is the error."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse
