// Light or dark: at first TensorBoard's theme when the host page is reachable (same origin; it
// sets body.dark-mode from the system's preference at load or from the user's pick in its
// menu), else the system's prefers-color-scheme; then whichever of the two changed last.
// The theme is the `data-theme` attribute of the tab's <html> (styles.ts keys on it).

export class ThemeWatcher {
  private dark: boolean;

  constructor(private readonly onChange: (dark: boolean) => void, private readonly win: Window = window) {
    const query = win.matchMedia?.("(prefers-color-scheme: dark)");
    const host = hostBody(win);
    this.dark = host ? host.classList.contains("dark-mode") : !!query?.matches;
    this.apply();
    query?.addEventListener?.("change", () => this.set(!!query.matches));
    if (host) {
      let hostDark = host.classList.contains("dark-mode");
      new MutationObserver(() => {
        if (host.classList.contains("dark-mode") === hostDark) return; // another class changed
        hostDark = !hostDark;
        this.set(hostDark);
      }).observe(host, { attributes: true, attributeFilter: ["class"] });
    }
  }

  get isDark(): boolean {
    return this.dark;
  }

  private set(dark: boolean): void {
    if (dark === this.dark) return;
    this.dark = dark;
    this.apply();
    this.onChange(dark);
  }

  private apply(): void {
    this.win.document.documentElement.setAttribute("data-theme", this.dark ? "dark" : "light");
  }
}

/** The host page's body (TensorBoard's), or null when not framed or of another origin. */
export function hostBody(win: Window = window): HTMLElement | null {
  try {
    return win.parent !== win ? win.parent.document.body : null;
  } catch {
    return null; // another origin
  }
}

export interface ChartColors { text: string; muted: string; grid: string; band: string; bandLine: string; line: string; error: string; bg: string; skip: string; border: string }

/** The theme's colors, from the stylesheet's custom properties on `root`. */
export function themeColors(root: Element): ChartColors {
  const s = getComputedStyle(root);
  const v = (name: string, fallback: string) => s.getPropertyValue(name).trim() || fallback;
  return {
    text: v("--text", "#212121"), muted: v("--muted", "#616161"), grid: v("--grid", "#eee"), band: v("--band", "rgba(76,175,80,.16)"),
    bandLine: v("--band-line", "#2e7d32"), line: v("--focus", "#1a73e8"), error: v("--error", "#c62828"), bg: v("--bg", "#fff"),
    skip: v("--skip", "#e65100"), border: v("--border", "#e0e0e0"),
  };
}
