"""Converting a veRL launch (the text of a script or override list) into an rft config.

:func:`convert_text` reads the launch (:mod:`~rft_plugin_convert_verl.parse`), applies the
rules (:mod:`~rft_plugin_convert_verl.mapping`), and writes the commented YAML
(:mod:`~rft_plugin_convert_verl.emit`) with the report
(:mod:`~rft_plugin_convert_verl.report`) in its header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rft_plugin_convert_verl import trainer_choice
from rft_plugin_convert_verl.emit import check_interpolations, env_variables, to_yaml
from rft_plugin_convert_verl.mapping import Conversion, convert_overrides
from rft_plugin_convert_verl.parse import ParsedLaunch, VerlConvertError, parse_launch
from rft_plugin_convert_verl.report import Report


@dataclass
class ConvertResult:
    """A converted launch: the config, its per-key sources, the report and the YAML."""

    launch: ParsedLaunch
    conversion: Conversion
    yaml: str

    @property
    def config(self) -> dict[str, Any]:
        return self.conversion.config

    @property
    def sources(self) -> dict[str, str]:
        return self.conversion.sources

    @property
    def report(self) -> Report:
        return self.conversion.report


def _header(source_name: str, launch: ParsedLaunch, report: Report,
            env: list[str]) -> list[str]:
    what = (f"the veRL launch ({launch.entry_point}, line {launch.launch_line})"
            if launch.kind == "script" else "a list of veRL overrides")
    lines = [f"# rft config converted by `rft convert-verl` from {what} in {source_name}.",
             "# The comment after each key names the veRL setting(s) it comes from",
             "# (\"veRL default\": the launch does not set it, veRL's default is used);",
             "# trainer.trainer_config keeps veRL worker settings unchanged."]
    if env:
        lines.append("# Environment variables read when rft loads this file: "
                     + ", ".join(env) + ".")
    if report:
        lines.append("#")
        lines.extend(report.comment_block())
    return lines


def convert_text(text: str, source_name: str = "<stdin>",
                 script_path: str | None = None, trainer: str | None = None) -> ConvertResult:
    """Convert a veRL launch script or override list (the text of the file).

    :param script_path: the script's file, when it is one (``$(dirname $0)`` of the script
        is its directory; default: a script in the current directory).
    :param trainer: ``torch`` or ``verl`` to force ``trainer.trainer_type`` (``--trainer``);
        ``None``: chosen by :mod:`~rft_plugin_convert_verl.trainer_choice`.
    :raises VerlConvertError: one line naming the culprit.
    """
    launch = parse_launch(text, source_name, script_path)
    if not launch.overrides and launch.kind != "script":
        raise VerlConvertError(f"{source_name}: no veRL overrides found")
    conversion = convert_overrides(launch.overrides, launch.config_name, launch.config_path)
    for line, argument, why in launch.ignored:
        conversion.report.add(argument, None, f"ignored: {why}", line)
    for note in launch.notes:
        conversion.report.note(note)
    trainer_choice.apply(conversion.config, conversion.sources, conversion.report,
                         conversion.needs, trainer)
    for path, problem in check_interpolations(conversion.config):
        conversion.report.note(f"{path}: {problem}")
    conversion.report.not_converted.sort(key=lambda entry: (entry.line == 0, entry.line))
    yaml_text = to_yaml(conversion.config, conversion.sources,
                        _header(source_name, launch, conversion.report,
                                env_variables(conversion.config)))
    return ConvertResult(launch, conversion, yaml_text)


__all__ = ["ConvertResult", "convert_text"]
