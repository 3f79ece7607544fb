"""Markdown for the pages that the benchmarks and the reproductions write: tables that fit the page's width, and prose
wrapped as it renders. It imports nothing of the package."""

import re


def markdown_table(header: list[str], rows: list[list[str]], keys: int = 1, width: int = 120) -> list[str]:
    """The lines of a Markdown table; where a line would be wider than `width`, several tables, one after the other,
    each with the first `keys` columns (what names a row) and as many of the others as fit. A column that does not
    fit even alone beside those becomes a list of "key: value" items (which wrap) under its header."""

    def lines_of(columns: list[int]) -> list[str]:
        return ["| " + " | ".join(header[c] for c in columns) + " |", "|" + "---|" * len(columns)] + [
            "| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows
        ]

    groups, group = [], list(range(keys))
    for column in range(keys, len(header)):
        if len(group) > keys and max(map(len, lines_of([*group, column]))) > width:
            groups.append(group)
            group = list(range(keys))
        group.append(column)
    groups.append(group)
    lines = []
    for group in groups:
        table = lines_of(group)
        if len(group) == keys + 1 and max(map(len, table)) > width:
            column = group[-1]
            table = [f"{' / '.join(header[:keys])}: {header[column]}", ""] + [
                f"- {' / '.join(map(str, row[:keys]))}: {row[column]}" for row in rows
            ]
        lines += ["", *table]
    return lines[1:]


# A word that markdown would read as the start of another block at the start of a line: a list marker, a heading,
# a quote, a table row.
_MARKDOWN_BLOCK_START = re.compile(r"^([-+*]|\d+[.)])$|^[#>|]")


def wrap_markdown(text: str, width: int = 120) -> str:
    """`text` with every prose line longer than `width` broken at spaces (a list item's continuation indented under
    it), which renders the same; table rows, headings, images and code blocks are kept whole (markdown tables have
    no continuation lines), and a word that would start a line as another block takes the word before along."""
    lines, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if fence or len(line) <= width or line.startswith(("```", "|", "#", ">", "![", "<")):
            lines.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]  # a continuation line keeps its indentation
        indent = lead + ("  " if line.lstrip(" ").startswith("- ") else "")
        current, *words = line.split(" ")
        for word in words:
            if len(current) + 1 + len(word) <= width:
                current += " " + word
            elif _MARKDOWN_BLOCK_START.match(word) and current.strip().count(" "):  # take the word before along
                current, before = current.rsplit(" ", 1)
                lines.append(current)
                current = f"{indent}{before} {word}"
            else:
                lines.append(current)
                current = indent + word
        lines.append(current)
    return "\n".join(lines)
