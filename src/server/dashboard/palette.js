// Colours of the block map: one hue per tenant slot, stepped by the golden angle so that tenants
// that are alive together get hues far apart (slots are small dense integers reused only after
// a tenant is forgotten). Cells are written straight into ImageData, so colours are packed
// 32-bit pixels (little-endian RGBA: 0xAABBGGRR).

const GOLDEN_ANGLE = 137.508;

export function tenantHue(slot) {
  return (205 + slot * GOLDEN_ANGLE) % 360;
}

export function hslToRgb(h, s, l) {
  const k = (n) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(f(0) * 255), Math.round(f(8) * 255), Math.round(f(4) * 255)];
}

export function packRgb([r, g, b]) {
  return ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;
}

export function cssRgb([r, g, b]) {
  return `rgb(${r}, ${g}, ${b})`;
}

export const BACKGROUND = packRgb([22, 27, 34]);   // --card
export const FREE = packRgb([33, 38, 45]);         // --free
export const OTHER_GROUP = packRgb([58, 64, 72]);  // a block of a layer group not shown
export const LOADING = packRgb([210, 153, 34]);
export const LOADING_DARK = packRgb([107, 78, 15]);
export const SHARED_MARK = packRgb([255, 255, 255]);

// Per tenant slot: in use (bright), in use but not yet filled (dark), cached-free (dim).
export class Palette {
  constructor() {
    this.cache = new Map();
  }

  tenant(slot) {
    let c = this.cache.get(slot);
    if (!c) {
      const h = tenantHue(slot);
      const used = hslToRgb(h, 0.75, 0.58);
      c = {
        hue: h,
        used: packRgb(used),
        usedCss: cssRgb(used),
        unfilled: packRgb(hslToRgb(h, 0.55, 0.24)),
        cached: packRgb(hslToRgb(h, 0.32, 0.33)),
      };
      this.cache.set(slot, c);
    }
    return c;
  }
}
