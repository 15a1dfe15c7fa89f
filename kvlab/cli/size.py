"""``kvlab size``: a model's KV cache as an engine allocates it, layer group by layer group: the bytes per token
on one GPU, and the GiB a prompt of ``--tokens`` takes (or the tokens ``--gib`` holds); JSON, or a table."""

from kvlab.api import sizes
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import FormatSettings


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, sizes.SizeSettings)
    add_arguments(parser, FormatSettings)
    return parser


fitting = sizes.fitting  # the most tokens one prompt may have within a budget of bytes


def table(result):
    lines = [
        f"{result['model']}: tp {result['tp']}, KV in {result['kv_dtype']}"
        f" ({result['element_bytes']} bytes per element)",
        "",
        f"{'group':<8} {'layers':>6} {'bytes per token per GPU':>24}  at most per request",
    ]
    for group in result["groups"]:
        cap = group.get("bytes_per_request", group.get("bytes_per_request_at_most"))
        extra = f"{cap:,} bytes" if cap is not None else ""
        lines.append(f"{group['kind']:<8} {group['layers']:>6} {group['bytes_per_token']:>24,}  {extra}")
    lines.append(f"growth per token: {result['bytes_per_token']:,} bytes per GPU")
    if "tokens" in result:
        lines.append(f"{result['tokens']:,} tokens: {result['bytes']:,} bytes = {result['gib_for_tokens']} GiB per GPU")
    return "\n".join(lines) + "\n"


def execute(args, parser):
    result = sizes.size(**{key: getattr(args, key) for key in ("model_config", "tp", "kv_dtype", "tokens", "gib")})
    return Outputs(stdout=table(result.to_dict()) if args.format == "table" else result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
