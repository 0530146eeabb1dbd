// The "Count positions from 1" control of Display (the template's <div data-view="counting">): every position the
// page prints, and every position a person types, counts from 1 as the chapter does (positions.js). Pure render from
// the state; bind() wires the checkbox. `feature` is its one declaration (features.js): its setting, link key,
// action and reducer case; the request is untouched (the API counts from 0 whatever the page prints).

const actions = {
  countSet: (from1) => ({ type: "countSet", from1 }), // positions printed from 1 (positions.js)
};

export const feature = {
  ui: { from1: false }, // positions printed from 1, as the chapter counts (positions.js); the API stays 0-based
  link: {
    write(ui, p) {
      if (ui.from1) p.set("from1", "1");
    },
    read: (p) => ({ from1: p.get("from1") === "1" }),
  },
  actions,
  reduce: { countSet: (s, a, { setUi }) => setUi(s, { from1: !!a.from1 }) },
};

export function deps(s) {
  return [s.ui.from1];
}

export function render(root, s) {
  root.querySelector("#count-from1").checked = !!s.ui.from1;
}

export function bind(root, { dispatch }) {
  root.querySelector("#count-from1").addEventListener("change", (e) => dispatch(actions.countSet(e.target.checked)));
}
