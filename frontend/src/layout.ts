// Geometry of the page that the views share. Pure: rectangles in, pixels out.

/** A vertical extent in viewport pixels. */
export interface Span { top: number; bottom: number }

/** How far to scroll down (0: not at all) to show `target`, opened below `row`, within `view`
 * (the part of the window not under the sticky toolbar): its whole height where the row stays
 * in view, else as much as keeps the row at the view's top. `margin`: pixels kept free. */
export function scrollToShow(row: Span, target: Span, view: Span, margin = 8): number {
  const toShowAll = target.bottom + margin - view.bottom;
  const rowStays = row.top - margin - view.top;
  return Math.max(0, Math.min(toShowAll, rowStays));
}
