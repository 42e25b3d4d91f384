// Rule links in problems point at docs/rules.md on the web; the .vsix ships that page (docs/rules.md),
// so they open it locally, offline, at the rule's heading. No vscode import: unit-testable.

/** The 1-based line of each `## ` heading of a Markdown page, by its GitHub anchor. */
export function headingLines(markdown: string): Map<string, number> {
  const lines = new Map<string, number>();
  markdown.split('\n').forEach((line, i) => {
    const heading = /^#{1,6}\s+(.*)$/.exec(line.trim());
    if (heading) {
      lines.set(anchorOf(heading[1]), i + 1);
    }
  });
  return lines;
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
export function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/**
 * The local link for `href` when it points at the rules page (`…/docs/rules.md#anchor`): `page` (a file
 * URI of the shipped copy) with `#L<line>` of the anchor's heading, which VS Code opens at that line.
 */
export function localRuleLink(href: string, page: string, lines: Map<string, number>): string | undefined {
  const match = /\/docs\/rules\.md(?:#(.*))?$/.exec(href);
  if (!match) {
    return undefined;
  }
  const line = match[1] ? lines.get(match[1]) : undefined;
  return line ? `${page}#L${line}` : page;
}
