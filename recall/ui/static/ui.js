// The explorer's one keyboard shortcut: "/" focuses the search box (the page's first one), as on most sites.
document.addEventListener("keydown", function (e) {
  if (e.key !== "/" || e.ctrlKey || e.metaKey || e.altKey) return;
  var t = e.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
  var box = document.querySelector("input[type=search]");
  if (box) { e.preventDefault(); box.focus(); box.select(); }
});
