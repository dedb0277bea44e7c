// The Tessera console's only script: times in the viewer's zone, and copy buttons.
"use strict";
document.querySelectorAll("time[datetime]").forEach(function (t) {
  var at = new Date(t.getAttribute("datetime"));
  if (isNaN(at.getTime())) return;
  t.title = t.getAttribute("datetime").replace("T", " ").replace("Z", " UTC");
  t.textContent = at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
});
document.querySelectorAll("button[data-copy]").forEach(function (button) {
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) return;
  button.hidden = false;
  button.addEventListener("click", function () {
    navigator.clipboard.writeText(source.textContent).then(
      function () { button.textContent = "Copied"; },
      function () { button.textContent = "Copy failed: select the text and copy it"; }
    );
  });
});
// "Create a client": the warning about admin plans shows while one is chosen.
(function () {
  var plan = document.getElementById("client-plan");
  var warning = document.getElementById("admin-warning");
  if (!plan || !warning) return;
  var show = function () {
    var chosen = plan.options[plan.selectedIndex];
    warning.hidden = !(chosen && chosen.hasAttribute("data-admin"));
  };
  plan.addEventListener("change", show);
  show();
})();
