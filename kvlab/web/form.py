"""The page's form, derived from the declarations the commands' flags come from (kvlab/util/settings.py): the
workload's sources and their options (kvlab/workloads/), a plan's settings (``kvlab.api.plans.PlanSettings``), the
hardware's (``kvlab.latency.hardware.HardwareSettings``) and the load. A field shows its flag's help, offers its
choices, and is checked by the API as the flag is. Nothing here reads a path from a form value: a model is one of
the models folder's names or an upload, a trace only an upload (kvlab/web/app.py keeps uploads in its own folder).
"""

from dataclasses import MISSING, dataclass, fields

__all__ = ["FIELDS", "SEARCH_FIELDS", "Field", "keywords", "search_keywords"]

# a plan's settings the page leaves to the command: the other spellings of a room, and a prices file's path
LEFT_OUT = {"gpu_gib", "cpu_gib_per_node", "disk_tokens", "prices"}
HARDWARE_OWN = {"model_config", "engine", "tp", "kv_dtype", "disk_medium", "disk_gbps", "disk_us"}


@dataclass(frozen=True)
class Field:
    """One input of the form: its name (the API's keyword), its group, its help, its choices (a select) and its
    default as text ("" for none)."""

    name: str
    group: str
    help: str
    choices: tuple = ()
    default: str = ""
    source: str = ""  # a workload option's sources, comma-separated
    switch: bool = False  # on or off (a checkbox)


def _default(found):
    value = found.default
    if value is MISSING or value is None or value is False:
        return ""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _fields():
    from kvlab.api.plans import PlanSettings
    from kvlab.latency.hardware import HardwareSettings
    from kvlab.latency.systems import system_names
    from kvlab.workloads import WORKLOADS

    found = [Field("workload", "workload", "the source of requests", tuple(sorted(WORKLOADS)), "lab")]
    owners = {}
    for source in WORKLOADS.values():
        for option in source.options:
            owners.setdefault(option.name, (option, []))[1].append(source.name)
    for option, sources in owners.values():
        if option.name == "trace":
            continue  # an upload
        choices = tuple(option.metadata["choices"] or ())
        found.append(
            Field(option.name, "workload", option.metadata["help"], choices, _default(option), ",".join(sources))
        )
    for declared in fields(PlanSettings):
        if declared.name in LEFT_OUT or not declared.metadata:
            continue
        choices = tuple(declared.metadata["choices"] or ())
        found.append(Field(declared.name, "plan", declared.metadata["help"], choices, _default(declared)))
    found.append(
        Field("prices", "plan", "also what the plan costs per hour: kvlab's shipped list prices", ("default",))
    )
    for declared in fields(HardwareSettings):
        if declared.name in HARDWARE_OWN or not declared.metadata:
            continue
        choices = tuple(system_names()) if declared.name == "gpu_system" else tuple(declared.metadata["choices"] or ())
        default = "" if declared.name in ("gpu_system", "latency_source") else _default(declared)
        switch = bool(declared.metadata["switch"])
        found.append(Field(declared.name, "hardware", declared.metadata["help"], choices, default, switch=switch))
    found.append(
        Field("load", "hardware", "also the time under this load: speedup=S, rate=R (requests/s) or clients=N")
    )
    return tuple(found)


def _search_fields():
    """The search's form: the workload's fields (the plan's), its space and SLO (``SearchSpace``' fields but where
    it keeps its evaluations), the load, and the latency's source."""
    from kvlab.api.searches import SearchSpace

    found = [field for field in FIELDS if field.group == "workload"]
    for declared in fields(SearchSpace):
        if declared.name == "evaluations":
            continue
        if declared.name == "prices":  # a file's path is never read from a form value
            found.append(Field("prices", "search", "kvlab's shipped list prices", ("default",), "default"))
            continue
        found.append(Field(declared.name, "search", declared.metadata["help"], (), _default(declared)))
    found += [BY_NAME["load"], BY_NAME["latency_source"]]
    return tuple(found)


FIELDS = _fields()
BY_NAME = {field.name: field for field in FIELDS}
SEARCH_FIELDS = _search_fields()
GRIDS = ("cpu_gib", "disk_gib")  # a comma-separated list: one plan per value


def search_keywords(values, model_config, trace):
    """kvlab.search's keywords from the search form's ``values`` (as :func:`keywords`: the chosen source's options;
    the load's spec as its keyword)."""
    from kvlab.api.plans import load_spec
    from kvlab.util.errors import SettingError

    given = keywords(values, model_config, trace, SEARCH_FIELDS)
    if "load" in given:
        try:
            given |= load_spec(given.pop("load"))
        except ValueError as error:
            raise SettingError(f"argument --load: {error}") from None
    return given


def keywords(values, model_config, trace, form=None):
    """kvlab.plan's keywords from the form's ``values`` (text by field name; "" for none), the model's path and the
    uploaded trace's (or None): the chosen source's options only, a grid's values as a list."""
    from kvlab.workloads import WORKLOADS

    source = values.get("workload") or "lab"
    own = {option.name for option in WORKLOADS[source].options} if source in WORKLOADS else set()
    given = {"workload": source, "model_config": model_config}
    if (values.get("prices") or "").strip() not in ("", "default"):  # a prices file is a path: never from a form
        from kvlab.util.errors import SettingError

        raise SettingError("argument --prices: the page prices with kvlab's shipped list prices only (default)")
    for field in form or FIELDS:
        value = (values.get(field.name) or "").strip()
        if field.name == "workload" or not value or (value == field.default and not field.switch):
            continue  # a default is the API's own: the command line and the link stay short
        if field.group == "workload" and field.name not in own:
            continue
        if field.switch:
            given[field.name] = value == "on"
            continue
        given[field.name] = [item.strip() for item in value.split(",")] if field.name in GRIDS else value
    if "trace" in own:
        given["trace"] = trace
    return given
