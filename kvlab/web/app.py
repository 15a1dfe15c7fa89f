"""``kvlab serve``'s page: a form over ``kvlab.plan`` (Flask, a small WSGI framework; its charts drawn by matplotlib
as SVG in the page, so nothing is fetched from elsewhere and no script framework is needed).

A question is a job of its own: a process (forked from a clean server process that has the API imported, so that a
cancel is a terminate and a crash stays in it) that runs
``kvlab.plan`` for the CPU budgets asked (a grid) and ``kvlab.curve`` for each tier's exact curve. The page for a
running job shows how long it has run, refreshes itself every second, and has a cancel button. Its answer: the curve
per tier with the budgets marked, a table per budget (hit ratio, TTFT alone and under load, throughput, cost, the
verdict), the settings to paste (a copy button), the same question as a ``kvlab plan`` command line, and a link to the
page with the form's state (everything but an upload).

Bad input gets the command's own line beside its field. Uploads (a model's ``config.json``, a trace) are bounded in
size, written only inside the page's temporary folder (removed at exit), under names the page makes; no path is
ever read from a form value: a model is one of the models folder's names, a trace only an upload.
"""

import html
import io
import multiprocessing
import secrets
import shlex
import shutil
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

from kvlab.util.settings import flag
from kvlab.web.form import BY_NAME, FIELDS, GRIDS, SEARCH_FIELDS, keywords, search_keywords

__all__ = ["make_app"]

MAX_UPLOAD = 256 * 2**20  # bytes of one request's uploads
SEARCH_NAMES = {field.name for field in SEARCH_FIELDS}
JOBS_KEPT = 64  # finished jobs a page keeps, the oldest dropped first (their uploads removed)
MAX_RUNNING = 4  # questions at work at once


def make_app(models, folder, max_upload=MAX_UPLOAD):
    """The Flask app: ``models`` the folder of shipped models (one ``config.json`` per subfolder), ``folder`` the page's
    temporary folder (uploads, and nothing else)."""
    from flask import Flask, Response, abort, redirect, request

    multiprocessing.get_context("forkserver").set_forkserver_preload(["kvlab.api.plans", "kvlab.api.curves"])

    app = Flask("kvlab.web")
    app.config["MAX_CONTENT_LENGTH"] = max_upload
    shipped = {path.parent.name: path for path in sorted(Path(models).glob("*/config.json"))}
    jobs, held = {}, threading.Lock()

    def page(title, body, refresh=False):
        head = '<meta http-equiv="refresh" content="1">' if refresh else ""
        text = PAGE.format(title=html.escape(title), head=head, body=body)
        return Response(text, mimetype="text/html")

    @app.get("/")
    def form():
        values = {name: request.args.get(name, "") for name in BY_NAME}
        values["model"] = request.args.get("model", "")
        return page("kvlab", render_form(values, {}, shipped))

    @app.get("/search")
    def search_form():
        values = {field.name: request.args.get(field.name, "") for field in SEARCH_FIELDS}
        values["model"] = request.args.get("model", "")
        return page("kvlab search", render_form(values, {}, shipped, "search"))

    @app.post("/ask-search")
    def ask_search():
        return ask("search")

    @app.post("/ask")
    def ask(kind="plan"):
        form = SEARCH_FIELDS if kind == "search" else FIELDS
        values = {field.name: request.form.get(field.name, "") for field in form}
        for field in form:
            if field.switch:
                values[field.name] = "on" if request.form.get(field.name) else ""
        values["model"] = request.form.get("model", "")
        errors = {}
        model = upload(request.files.get("model_upload"), folder, "config.json")
        if model is None:
            if values["model"] not in shipped:
                errors["model"] = "choose a model, or upload its config.json"
            else:
                model = shipped[values["model"]]
        trace = upload(request.files.get("trace_upload"), folder, "trace")
        paths = (str(model) if model else None, str(trace) if trace else None)
        try:
            given = search_keywords(values, *paths) if kind == "search" else keywords(values, *paths)
        except ValueError as error:
            given, errors[field_of(str(error))] = {}, str(error)
        if kind == "search":  # its simulations kept in the page's folder, with the rest of what it writes
            given["evaluations"] = str(Path(folder) / "evaluations")
        if "trace" in given and trace is None:
            errors["trace"] = f"--workload {values.get('workload')} reads a trace: upload one"
        with held:
            running = sum(not job.done for job in jobs.values())
        if running >= MAX_RUNNING:
            errors["form"] = f"the page is answering {MAX_RUNNING} questions already: wait for one, or cancel one"
        if errors:
            for saved in (trace, model if model not in shipped.values() else None):
                if saved is not None:
                    shutil.rmtree(Path(saved).parent, ignore_errors=True)
            return page("kvlab", render_form(values, errors, shipped, kind))
        uploads = {}  # an upload's path, as a message names it -> (its field, what the page calls it)
        if trace is not None:
            uploads[str(trace)] = ("trace", "the uploaded trace")
        if model is not None and model not in shipped.values():
            uploads[str(model)] = ("model", "the uploaded config.json")
        job = Job(given, values, model is not None and model in shipped.values(), uploads, kind)
        with held:  # the server answers each request in a thread of its own
            jobs[job.id] = job
            dropped = [key for key in jobs if jobs[key].done][:-JOBS_KEPT] if len(jobs) > JOBS_KEPT else []
            dropped = [jobs.pop(key) for key in dropped]
        for old in dropped:
            old.forget()
        return redirect(f"/job/{job.id}", code=303)

    @app.get("/job/<identifier>")
    def job_page(identifier):
        job = jobs.get(identifier)
        if job is None:
            abort(404)
        state = job.poll()
        if state == "running":
            body = (
                f"<p>Working on it: {time.monotonic() - job.started:.0f} s so far.</p>"
                f'<form method="post" action="/job/{job.id}/cancel"><button>cancel</button></form>'
            )
            return page("kvlab: working", body, refresh=True)
        if state == "cancelled":
            return page("kvlab", "<p>Cancelled.</p>" + render_form(job.values, {}, shipped, job.kind))
        if state == "failed":
            errors = {job.field or field_of(job.error): job.error}
            return page("kvlab", render_form(job.values, errors, shipped, job.kind))
        shown = render_search(job) if job.kind == "search" else render_answer(job)
        return page("kvlab: answer", shown + render_form(job.values, {}, shipped, job.kind))

    @app.post("/job/<identifier>/cancel")
    def cancel(identifier):
        job = jobs.get(identifier)
        if job is None:
            abort(404)
        job.cancel()
        return redirect(f"/job/{job.id}", code=303)

    @app.errorhandler(413)
    def too_large(_):
        said = f"The request is too large: uploads up to {max_upload // 2**20} MiB, a field's text up to 500 KB."
        return page("kvlab", f"<p class=error>{said}</p>"), 413

    app.jobs = jobs
    return app


def upload(stored, folder, name):
    """An uploaded file saved in ``folder`` under a name the page makes (never the sender's), or None."""
    if stored is None or not stored.filename:
        return None
    target = Path(folder) / secrets.token_hex(8)
    target.mkdir()
    suffix = ".gz" if stored.filename.endswith(".gz") else ".csv" if stored.filename.endswith(".csv") else ""
    path = target / (name + (suffix if name == "trace" else ""))
    stored.save(path)
    return path


def field_of(message):
    """The field a message of the API's is about (its flag: ``argument --cpu-gib: ...``), else the form's top."""
    import re

    found = re.match(r"(?:argument )?--([a-z-]+)", message)
    name = found.group(1).replace("-", "_") if found else ""
    if name == "model_config":
        return "model"
    return name if name in BY_NAME or name in SEARCH_NAMES or name == "trace" else "form"


class Job:
    """One question, in a process of its own."""

    def __init__(self, given, values, shipped_model, uploads=None, kind="plan"):
        context = multiprocessing.get_context("forkserver")  # a clean process to fork from: safe beside threads
        self.id = secrets.token_hex(8)
        self.given, self.values, self.shipped_model = given, values, shipped_model
        self.uploads, self.field = uploads or {}, None
        self.queue = context.Queue()
        self.kind = kind
        self.process = context.Process(target=answer, args=(given, self.queue, kind), daemon=True)
        self.started = time.monotonic()
        self.process.start()
        self.state, self.result, self.error, self.seconds = "running", None, None, None
        threading.Thread(target=self._wait, daemon=True).start()

    @property
    def done(self):
        return self.state != "running"

    def _wait(self):
        """Take the answer as soon as it is sent (so that the process ends and frees its memory then, and its time is
        the work's, not the first look's), or see the process end without one."""
        import queue

        while self.state == "running":
            try:
                kind, payload = self.queue.get(timeout=0.2)
            except queue.Empty:
                if not self.process.is_alive() and self.state == "running":
                    self.error, self.state = "the work stopped without an answer", "failed"
                continue
            self.seconds = time.monotonic() - self.started
            self.result, self.error = (payload, None) if kind == "answer" else (None, payload)
            for path, (field, called) in self.uploads.items():  # the page's folder is not the user's business
                if self.error and path in self.error:
                    self.error, self.field = self.error.replace(path, called), field
            self.state = "answered" if kind == "answer" else "failed"
        self.process.join(timeout=5)

    def poll(self):
        return self.state

    def cancel(self):
        """Stop the work if it still runs (an answer already taken stays)."""
        if self.state == "running":
            self.state = "cancelled"
            self.process.terminate()
            self.process.join(timeout=5)

    def forget(self):
        """The job's uploads removed (it is dropped from the page's memory)."""
        import shutil

        self.cancel()
        for path in self.uploads:
            shutil.rmtree(Path(path).parent, ignore_errors=True)


def answer(given, queue, kind="plan"):
    """The job's work (in its own process): the plans of the budgets asked and each tier's curve (JSON and SVG), or
    a search's answer."""
    try:
        if kind == "search":
            from kvlab import api

            queue.put(("answer", api.search(**given).to_dict()))
        else:
            queue.put(("answer", compute(given)))
    except ValueError as error:  # the API's bad input: its one line
        queue.put(("error", str(error).splitlines()[0]))
    except Exception as error:  # noqa: BLE001 - anything else, in one line, never a traceback on the page
        queue.put(("error", f"{type(error).__name__}: {error}".splitlines()[0]))


def compute(given):
    from kvlab import api

    result = api.plan(**given)
    plans = [point.to_dict() for point in result] if isinstance(result, api.Grid) else [result.to_dict()]
    first = plans[0]
    options = {k: v for k, v in given.items() if k not in BY_NAME or BY_NAME[k].group == "workload"}
    options.pop("model_config", None)
    chunk = first["cache"]["chunk_tokens"]
    gpu = api.curve(**options, block_tokens=chunk)
    cpu = api.curve(**options, block_tokens=chunk, gpu_tokens=first["cache"]["gpu_tokens"])
    return {"plans": plans, "chart": chart(gpu, cpu, plans)}


def chart(gpu, cpu, plans):
    """Each tier's exact curve (hit ratio against GiB), the plans' rooms marked: an SVG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_token = plans[0]["model"]["bytes_per_token"]
    figure, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for axis, curve, room, title in (
        (axes[0], gpu, "gpu_tokens", "GPU tier"),
        (axes[1], cpu, "cpu_tokens", "CPU tier at the GPU room"),
    ):
        frame = curve.to_frame()
        axis.step(frame[room] * per_token / 2**30, frame["token_hit_ratio"], where="post")
        for plan in plans:
            axis.axvline(plan["cache"][room] * per_token / 2**30, color="tab:red", linewidth=0.8)
        axis.set_title(title)
        axis.set_xlabel("GiB per GPU")
        axis.set_ylabel("token hit ratio")
    figure.tight_layout()
    text = io.StringIO()
    figure.savefig(text, format="svg", metadata={"Date": None})
    plt.close(figure)
    svg = text.getvalue()
    return svg[svg.index("<svg") :]


def command_line(given, shipped_model, command="plan"):
    """The same question as a ``kvlab plan`` (or ``search``) command line (an upload's path is the user's own: named
    so)."""
    words = ["kvlab", command]
    for key, value in given.items():
        if key == "evaluations":  # the page's own folder: a command of the user's keeps its own
            continue
        if key == "model_config":
            value = value if shipped_model else "YOUR_CONFIG.json"
        if key == "trace":
            value = "YOUR_TRACE"
        if value is True:
            words.append(flag(key))
            continue
        if value is False or value is None:
            continue
        words += [flag(key), ",".join(value) if isinstance(value, list) else str(value)]
    return shlex.join(words)


def render_answer(job):
    from kvlab.sizing.plan import setting_items

    plans = job.result["plans"]
    rows = []
    for plan in plans:
        load, ttft, cost = plan.get("load"), plan.get("ttft"), plan.get("cost")
        cells = [
            plan["cache"]["cpu_gib"],
            plan["token_hit_ratio"],
            ttft["all"]["p50_ms"] if ttft else "-",
            ttft["all"]["p99_ms"] if ttft else "-",
            load["ttft_ms"]["p50"] if load else "-",
            load["ttft_ms"]["p99"] if load else "-",
            load["output_tokens_per_s"] if load else "-",
            cost["per_hour"]["total"] if cost else "-",
            plan["verdict"]["line"],
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>")
    head = (
        "<tr><th>CPU GiB</th><th>hit ratio</th><th>TTFT p50 ms</th><th>TTFT p99 ms</th><th>load TTFT p50 ms</th>"
        "<th>load TTFT p99 ms</th><th>output tokens/s</th><th>cost per hour</th><th>offloading helps?</th></tr>"
    )
    settings = ""
    if "engine" in plans[0]:
        items = "\n".join(" \\\n".join(setting_items(plan["engine"])) for plan in plans[:1])
        settings = (
            "<h2>Settings to paste</h2>"
            f'<pre id="settings">{html.escape(items)}</pre>'
            '<button type="button" onclick="navigator.clipboard.writeText('
            "document.getElementById('settings').textContent)\">copy</button>"
        )
    state = {key: value for key, value in job.values.items() if value}
    link = "/?" + urlencode(state)
    command = command_line(job.given, job.shipped_model)
    return (
        f"<h2>Answer</h2><p>{len(plans)} plan(s) in {job.seconds:.1f} s.</p>"
        f'<div class="chart">{job.result["chart"]}</div>'
        f'<table id="answer">{head}{"".join(rows)}</table>{settings}'
        f'<h2>The same question</h2><pre id="command">{html.escape(command)}</pre>'
        f'<p><a id="link" href="{html.escape(link)}">this form, filled as it was</a></p>'
    )


def render_search(job):
    """A search's answer: the winner, the frontier, the verdict, the same question as a command and a link."""
    from kvlab.api.searches import label

    document = job.result
    first = document["slo"].split(",")[0]
    metric = first.split("<")[0].split(">")[0]
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(cell))}</td>"
            for cell in (
                row["cost_per_hour"],
                row[metric],
                "meets" if row["meets_slo"] else "misses",
                label(row["configuration"]),
            )
        )
        + "</tr>"
        for row in document["frontier"]
    )
    winner = document["winner"]
    said = "none meets the SLO" if winner is None else f"{label(winner['configuration'])}: {winner['cost_per_hour']:g}"
    said += f" {document['prices']['currency']} per hour" if winner else ""
    counts = document["search"]
    state = {key: value for key, value in job.values.items() if value}
    command = command_line(job.given, job.shipped_model, "search")
    return (
        f"<h2>Answer</h2><p>{counts['configurations']:,} configurations, {counts['evaluated']:,} simulated, in"
        f" {job.seconds:.1f} s.</p>"
        f'<p id="winner">winner: {html.escape(said)}</p>'
        f'<table id="frontier"><tr><th>cost per hour</th><th>{html.escape(metric)}</th><th>SLO</th>'
        f"<th>configuration</th></tr>{rows}</table>"
        f'<p id="verdict">offloading helps? {html.escape(document["verdict"]["line"])}</p>'
        f'<h2>The same question</h2><pre id="command">{html.escape(command)}</pre>'
        f'<p><a id="link" href="/search?{html.escape(urlencode(state))}">this form, filled as it was</a></p>'
    )


def render_form(values, errors, shipped, kind="plan"):
    form, action = (SEARCH_FIELDS, "/ask-search") if kind == "search" else (FIELDS, "/ask")
    groups = ("workload", "search") if kind == "search" else ("workload", "plan", "hardware")

    def error(name):
        said = errors.get(name)
        return f' <span class="error" id="error-{name}">{html.escape(said)}</span>' if said else ""

    parts = [f'<p class="error" id="error-form">{html.escape(errors["form"])}</p>' if "form" in errors else ""]
    other = '<a href="/search">the cheapest fleet under an SLO</a>' if kind != "search" else '<a href="/">a plan</a>'
    parts.append(f"<p>Or ask for {other}.</p>")
    parts.append(f'<form method="post" action="{action}" enctype="multipart/form-data">')
    options = "".join(
        f'<option value="{html.escape(name)}"{" selected" if name == values.get("model") else ""}>'
        f"{html.escape(name)}</option>"
        for name in shipped
    )
    parts.append(
        '<fieldset><legend>model</legend><label>shipped <select name="model"><option value=""></option>'
        f"{options}</select></label> or <label>its config.json <input type=file name=model_upload></label>"
        f"{error('model')}</fieldset>"
    )
    for group in groups:
        parts.append(f"<fieldset><legend>{group}</legend>")
        if group == "workload":
            parts.append(f"<label>trace (an upload) <input type=file name=trace_upload></label>{error('trace')}<br>")
        for field in (
            field
            for field in form
            if field.group == group or (kind == "search" and group == "search" and field.group == "hardware")
        ):
            parts.append(render_field(field, values.get(field.name, ""), error(field.name)))
        parts.append("</fieldset>")
    parts.append("<button>ask</button></form>")
    return "".join(parts)


def render_field(field, value, said):
    label = html.escape(field.name.replace("_", " "))
    title = html.escape(field.help + (f" (--workload {field.source})" if field.source else ""))
    name = html.escape(field.name)
    if field.switch:
        checked = " checked" if value == "on" else ""
        control = f'<input type="checkbox" name="{name}" id="{name}"{checked}>'
    elif field.choices:
        chosen = value or field.default
        items = "".join(
            f'<option value="{html.escape(choice)}"{" selected" if choice == chosen else ""}>{html.escape(choice)}'
            "</option>"
            for choice in ("", *field.choices)
            if choice or field.name != "workload"
        )
        control = f'<select name="{name}" id="{name}">{items}</select>'
    else:
        shown = value if value else ""
        hint = html.escape(field.default)
        grid = " (a comma-separated list)" if field.name in GRIDS else ""
        control = f'<input name="{name}" id="{name}" value="{html.escape(shown)}" placeholder="{hint}">{grid}'
    sources = f" <small>({html.escape(field.source)})</small>" if field.source else ""
    return f'<div><label title="{title}">{label} {control}</label>{sources}{said}</div>'


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">{head}<title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; max-width: 70em; }}
fieldset {{ margin: 0.5em 0; }} label {{ margin-right: 1em; }} .error {{ color: #b00; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ccc; padding: 0.2em 0.5em; }}
pre {{ background: #f4f4f4; padding: 0.5em; white-space: pre-wrap; }}
</style></head>
<body><h1>kvlab: how much CPU offload, and does it help?</h1>
{body}
</body></html>
"""
