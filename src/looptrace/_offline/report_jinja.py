r"""The Jinja2 environment of `looptrace report`: escaping is the templates' default.

The page, its CSS and script and its charts are files of `templates/` (package data). Every
value a template prints passes `finalize` first, which shows control characters, bidirectional
overrides and other invisible characters as the terminal does (`text.escaped`: `\u202e`, not a
reordered line), then autoescape, which HTML-escapes it; markup a template made (a chart) passes
both as it is. No code of the report escapes by hand.
"""

from __future__ import annotations

import functools

import jinja2
from markupsafe import Markup

from looptrace._offline.text import escaped

TEMPLATES = "templates"  # the folder of `looptrace._offline` that holds them


def _shown(value: object) -> object:
    """Return a printed value as the terminal shows it; markup as it is."""
    if isinstance(value, Markup):
        return value
    return escaped(str(value))


@functools.cache
def environment() -> jinja2.Environment:
    """Return the report's environment: the package's templates, autoescape on."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("looptrace._offline", TEMPLATES),
        autoescape=True,
        finalize=_shown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    # `tojson` escapes <, >, & and ' (safe inside <script>); compact, as the hover data is large
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}
    env.globals["inline"] = functools.partial(_inline, env)
    return env


def _inline(env: jinja2.Environment, name: str) -> Markup:
    """Return the text of the package's stylesheet or script `name`, to inline in the page."""
    assert env.loader is not None
    text, _, _ = env.loader.get_source(env, name)
    if "</" in text:  # it would end the <style> or <script> element it is inlined in
        raise ValueError(f"{name}: contains '</'")
    return Markup(text)  # the package's own file, not data


def render(name: str, **context: object) -> Markup:
    """Return template `name` filled with `context`, as markup to put in another template."""
    return Markup(environment().get_template(name).render(**context))  # escaped as it was filled
