"""Every operation under /agp/, discovered from the URL resolver (for tests that must cover
routes other helpers add, without listing them)."""

from dataclasses import dataclass

from django.urls import URLPattern, URLResolver, get_resolver

OPEN_ROUTES = {"/agp/openapi.json", "/agp/docs"}
WRITE_METHODS = ("POST", "PATCH", "PUT", "DELETE")
SAMPLE_IDS = ("1", "sample-id")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    route: str
    view: object

    @property
    def collection(self) -> str:
        return self.path.removeprefix("/agp/").split("/")[0]

    def __str__(self):
        return f"{self.method} /{fill_route(self.route, lambda name: '{' + name + '}')}"


def _pattern_text(pattern) -> str:
    return str(pattern.pattern).lstrip("^").rstrip("$").replace("\\Z", "").replace("\\.", ".")


def fill_route(route: str, value) -> str:
    """The route with every named group ``(?P<name>...)`` or converter ``<conv:name>`` replaced
    by ``value`` (a string, or a function of the parameter's name)."""
    out, i = [], 0
    while i < len(route):
        if route.startswith("(?P<", i):
            name = route[i + 4:route.index(">", i)]
            depth, j = 0, i
            while j < len(route):
                if route[j] == "\\":
                    j += 2
                    continue
                depth += route[j] == "("
                depth -= route[j] == ")"
                j += 1
                if depth == 0:
                    break
            out.append(value(name) if callable(value) else value)
            i = j
        elif route[i] == "<":
            name = route[i + 1:route.index(">", i)].split(":")[-1]
            out.append(value(name) if callable(value) else value)
            i = route.index(">", i) + 1
        else:
            out.append(route[i])
            i += 1
    return "".join(out)


def _walk(patterns, prefix: str = ""):
    for entry in patterns:
        text = prefix + _pattern_text(entry)
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, text)
        elif isinstance(entry, URLPattern):
            yield text, entry


def _methods(callback) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions is not None:  # a DRF viewset route: method -> action
        return sorted(m.upper() for m in actions if m.upper() in ("GET", *WRITE_METHODS))
    view_class = getattr(callback, "cls", None)
    if view_class is not None:  # a DRF APIView
        return sorted(m.upper() for m in ("get", "post", "patch", "put", "delete") if hasattr(view_class, m))
    return []


def _concrete_path(route: str, callback) -> str:
    for value in SAMPLE_IDS:
        path = "/" + fill_route(route, value)
        try:
            match = get_resolver().resolve(path)
        except Exception:
            continue
        if match.func is callback:
            return path
    raise AssertionError(f"cannot build a sample path for {route}")


def discover() -> tuple[list[Operation], list[str]]:
    """Every (method, path) under /agp/, and the /agp/ routes that are not DRF views."""
    operations, not_drf = [], []
    for route, pattern in _walk(get_resolver().url_patterns):
        if not route.startswith("agp/") or "/" + route in OPEN_ROUTES:
            continue
        methods = _methods(pattern.callback)
        if not methods:
            not_drf.append(route)
            continue
        path = _concrete_path(route, pattern.callback)
        operations.extend(Operation(method, path, route, pattern.callback) for method in methods)
    return operations, not_drf
